"""The CUDA kernel sources compile as the loader builds them, without a GPU (and without cupy).

nvcc (when present) compiles every family for every storage dtype for sm_80 and sm_90; NVRTC (when cupy's
bindings load, e.g. a CuPy install on a machine without a GPU) compiles them with the loader's exact options.
Every kernel the wrappers launch must be defined in its family's source, so a renamed kernel fails here, not on
the GPU.
"""

from __future__ import annotations

import ast
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from serve.backend import kernel_sources as ks

CUDA_KERNELS_PY = Path(ks.__file__).with_name("cuda_kernels.py")
ARCHS = ("80", "90")
JOBS = [(family, dt) for family in ks.FAMILIES for dt in ks.DTYPE_DEFINES]


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    default = "/usr/local/cuda/bin/nvcc"
    return default if os.access(default, os.X_OK) else None


def _declared_kernels() -> dict[str, tuple[str, ...]]:
    """cuda_kernels.KERNELS, read with ast (importing the module would import cupy)."""
    for node in ast.parse(CUDA_KERNELS_PY.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "KERNELS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("cuda_kernels.py defines no KERNELS table")


def test_sources_need_no_headers():
    for family in ks.FAMILIES:
        includes = re.findall(r"^\s*#\s*include.*$", ks.source(family), re.MULTILINE)
        assert not includes, f"{family}: NVRTC compiles with no include path, found {includes}"


def test_every_launched_kernel_is_defined():
    declared = _declared_kernels()
    assert set(declared) == set(ks.FAMILIES)
    for family, names in declared.items():
        missing = set(names) - ks.kernel_names(family)
        assert not missing, f"{family}.cu does not define {sorted(missing)}"
    # literal launches in the wrappers are declared too
    text = CUDA_KERNELS_PY.read_text()
    for family, name in re.findall(r'_kernel\(\s*"(\w+)",\s*"(\w+)"', text):
        assert name in declared[family], f'_kernel("{family}", "{name}") is not in KERNELS'


def _nvcc_compile(nvcc: str, family: str, dt: str, tmp: str) -> str | None:
    src = Path(tmp, f"{family}_{dt}.cu")
    src.write_text(ks.source(family))
    gencode = [arg for cc in ARCHS for arg in ("-gencode", f"arch=compute_{cc},code=sm_{cc}")]
    cmd = [nvcc, *ks.options(dt), "--fatbin", *gencode, "-o", str(src.with_suffix(".fatbin")), str(src)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return None if done.returncode == 0 else f"{family} / {dt}:\n{done.stderr[-4000:]}"


def test_sources_compile_with_nvcc():
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc is not installed (looked on PATH and at /usr/local/cuda/bin/nvcc)")
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(min(len(JOBS), os.cpu_count() or 4)) as pool:
        errors = [e for e in pool.map(lambda job: _nvcc_compile(nvcc, *job, tmp), JOBS) if e]
    assert not errors, "\n\n".join(errors)


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as e:  # not installed, or the library does not load
        pytest.skip(f"NVRTC is not available through cupy: {e}")
    return nvrtc


def test_sources_compile_with_nvrtc():
    nvrtc = _nvrtc()

    def compile_one(job: tuple[str, str, str]) -> str | None:
        family, dt, cc = job
        prog = nvrtc.createProgram(ks.source(family), f"{family}.cu", [], [])
        try:  # CuPy appends -ftz=true and the device's -arch to the loader's options
            nvrtc.compileProgram(prog, [*ks.options(dt), f"-arch=sm_{cc}", "-ftz=true"])
            return None
        except Exception:
            return f"{family} / {dt} / sm_{cc}:\n{nvrtc.getProgramLog(prog)[-4000:]}"
        finally:
            nvrtc.destroyProgram(prog)

    jobs = [(family, dt, cc) for family, dt in JOBS for cc in ARCHS]
    with ThreadPoolExecutor(8) as pool:
        errors = [e for e in pool.map(compile_one, jobs) if e]
    assert not errors, "\n\n".join(errors)


def test_divider_matches_integer_division():
    rng = random.Random(0)
    divisors = [*range(1, 300), *(1 << k for k in range(31)), *((1 << k) + 1 for k in range(30)),
                *((1 << k) - 1 for k in range(2, 32)), *(rng.randrange(1, 1 << 31) for _ in range(300))]  # fmt: skip
    for d in divisors:
        _, magic, shift = ks.divider(d)
        assert 0 < magic < 1 << 32
        for n in (0, 1, d - 1, d, d + 1, (1 << 31) - 1, rng.randrange(1 << 31), rng.randrange(1 << 31)):
            if 0 <= n < 1 << 31:
                t = (n * magic) >> 32  # __umulhi
                assert t + n < 1 << 32 and (t + n) >> shift == n // d, (n, d)
    with pytest.raises(ValueError):
        ks.divider(0)


def test_unknown_family():
    with pytest.raises(ValueError, match="unknown kernel family"):
        ks.source("conv3d")


def test_kernel_sources_never_import_cupy():
    code = "import sys, serve.backend.kernel_sources; assert 'cupy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(ks.__file__).parents[2])
