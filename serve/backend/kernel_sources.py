"""The CUDA C sources of serve's kernels as the loader compiles them, without importing cupy.

`source(family)` is `kernels/common.cuh` followed by `kernels/<family>.cu` (with #line markers, so a compile
error names the right file and line); it is compiled once per storage type with `options(dtype_name)`. The CUDA
backend (`cuda_kernels`) compiles exactly this text; the CI test compiles it with nvcc for sm_80 and sm_90.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

__all__ = ["DTYPE_DEFINES", "FAMILIES", "KERNEL_NAME", "OPTIONS", "divider", "kernel_names", "options", "source"]

KERNELS_DIR = Path(__file__).with_name("kernels")
FAMILIES = ("activation", "softmax", "norm", "embedding", "pool", "im2col")
# numpy dtype name -> the C storage type common.cuh defines for it
DTYPE_DEFINES = {"float32": "float", "float16": "serve_half", "bfloat16": "serve_bf16"}
# accuracy first: no --use_fast_math (CuPy itself adds -ftz=true to every compile)
OPTIONS = ("-std=c++17",)
KERNEL_NAME = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(')


@cache
def source(family: str) -> str:
    """The full text compiled for `family` (one of FAMILIES)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown kernel family {family!r}; expected one of {', '.join(FAMILIES)}")
    common = KERNELS_DIR / "common.cuh"
    body = KERNELS_DIR / f"{family}.cu"
    return f'#line 1 "common.cuh"\n{common.read_text()}\n#line 1 "{body.name}"\n{body.read_text()}'


def options(dtype_name: str) -> tuple[str, ...]:
    """Compile options for one storage dtype ("float32", "float16" or "bfloat16")."""
    return OPTIONS + (f"-DSERVE_T={DTYPE_DEFINES[dtype_name]}",)


def kernel_names(family: str) -> set[str]:
    """The extern "C" kernels `family`'s source defines."""
    return set(KERNEL_NAME.findall(source(family)))


def divider(d: int) -> tuple[int, int, int]:
    """(d, magic, shift) such that n // d == (umulhi(n, magic) + n) >> shift for 0 <= n < 2**31 (`serve_div` in
    common.cuh; Granlund and Montgomery's method, as PyTorch's IntDivider)."""
    if not 1 <= d <= 0x7FFFFFFF:
        raise ValueError(f"divisor {d} is outside 1..2**31-1")
    shift = (d - 1).bit_length()  # the least s with 2**s >= d
    magic = ((1 << 32) * ((1 << shift) - d)) // d + 1
    return d, magic, shift
