"""serve's CUDA kernels run on the CPU: the logic of the real .cu text, checked in CI without a GPU.

What it is
    shim.h   maps the CUDA subset the kernels use onto C++: each CUDA thread of a block is a fiber (ucontext), blocks
             run one after another, __syncthreads is a block barrier, warp shuffles go through per-warp slots between
             warp barriers, __shared__ variables are statics. Fibers switch at barriers under three deterministic
             schedules (round robin, lowest thread first, highest thread first). Threads meeting at different
             barriers, or a block where every live thread waits, abort with a message.
    cupy/    a numpy stand-in for CuPy whose RawModule compiles the exact text serve/backend/kernel_sources.py gives
             NVRTC (common.cuh + <family>.cu, -std=c++17 -DSERVE_T=...) with g++ after shim.h (the fp16 inline-PTX
             conversions become host _Float16 ones), caches the library under the system temp dir keyed by a
             content hash, and launches kernels through ctypes after checking every argument against the kernel's
             C signature (count, scalar C types, pointee dtypes, contiguity). Fresh arrays are filled with 0xFF
             bytes (NaN); array arguments get 0xFF guard bytes checked after each launch (writes out of bounds);
             every launch runs under each schedule and must give bit-identical results (races).
    this     runs serve/backend/cuda_kernels.py's wrappers on that stand-in through a compact selection of the GPU
             test's own cases (tests/gpu/test_cuda_kernels.py: float64 numpy references, same tolerances) plus a
             few masks read through unusual strides: every wrapper, float32 / float16 / bfloat16, odd sizes in the
             warp-per-row and block-per-row regimes, 16-byte vector and scalar paths, masks with broadcast dims,
             causal, safe / unsafe fully masked rows, in-place out=, NaN and inf inputs, pooling with padding /
             dilation / ceil windows / NaN / ties, im2col. Then it checks that every kernel of
             cuda_kernels.KERNELS was launched for every storage type.

What it checks: indexing, loop bounds, reductions and their merges, masking, barriers and shuffles (as far as a
host schedule exposes them), argument packing and the wrappers' launch sizes. What it does not: GPU rounding
(host float32 libm, no FTZ, no FMA contraction), NVRTC-only errors (tests/unit/backend/test_cuda_kernel_sources.py),
races a host schedule never shows, speed.

Run by tests/unit/backend/test_kernels_emulated.py in a fresh interpreter with this folder first on sys.path.
By hand: PYTHONPATH=tests/unit/backend/kernel_emulator:. python tests/unit/backend/kernel_emulator/check_kernels.py
[substring ...] (only the cases whose id contains one of them). Prints one line per failure and "FAILURES <n>" last.
SERVE_KERNEL_EMU_KERNELS=<folder> compiles the kernels of another folder (a copy of serve/backend/kernels/);
SERVE_KERNEL_EMU_CACHE=<folder> moves the build cache (default: <system temp>/serve-kernel-emu-<uid>);
SERVE_KERNEL_EMU_SCHEDULES=0,1,2 picks the schedules, SERVE_KERNEL_EMU_CXX=g++ the compiler.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cupy
import numpy as np

if Path(cupy.__file__).resolve().parent.parent != Path(__file__).resolve().parent:
    raise SystemExit(f"not the emulator's cupy: {cupy.__file__} (put {Path(__file__).parent} first on PYTHONPATH)")

from serve.backend import cuda_kernels as ck
from serve.backend import kernel_sources

if os.environ.get("SERVE_KERNEL_EMU_KERNELS"):  # another kernels/ folder (the mutation test breaks a copy)
    kernel_sources.KERNELS_DIR = Path(os.environ["SERVE_KERNEL_EMU_KERNELS"])
    kernel_sources.source.cache_clear()
from tests.gpu import test_cuda_kernels as T

ACTS = ["none", "relu", "gelu", "gelu_tanh", "silu"]
# masks the GPU test lacks, read through strides other than 1 along keys: broadcast over keys (mk = 0, rows fully
# masked at random) and non-C-ordered masks (numpy keeps the order through the stand-in's copies)
T.MASKS.update({
    "bool_q_col": lambda rng, b, h, lq, lk: rng.random((b, 1, lq, 1)) < 0.6,
    "add_transposed": lambda rng, b, h, lq, lk: rng.standard_normal((lk, lq)).T,
    "bool_hqk_reversed": lambda rng, b, h, lq, lk: (rng.random((lk, lq, h)) < 0.7).transpose(2, 1, 0),
})  # fmt: skip


def cases() -> list[tuple[str, object, tuple]]:
    """(id, test function, arguments without rng) of every case; test functions taking `rng` get a fresh one."""
    out: list[tuple[str, object, tuple]] = []

    def add(fn, *args):
        out.append((f"{fn.__name__}[{'-'.join(_name(a) for a in args)}]", fn, args))

    for i, dt in enumerate(T.DTYPES):
        # activations: every act and every scale/shift combination per dtype, on odd (outer, C, inner) shapes
        shapes = [(3, 31, 1), (2, 33, 7), (2, 16, 49), (1, 1, 1), (5, 37, 3)]
        params = ["none", "shift", "scale", "both_f32", "both_dt"]
        for j, act in enumerate(ACTS):
            add(T.test_bias_activation, dt, act, shapes[(i + j) % 5], params[(2 * i + j) % 5])
        add(T.test_bias_activation, dt, "gelu", (2, 33, 300), "both_dt")  # past the 64 x 256 threads: grid-stride
        add(T.test_bias_activation_out_poisoned, dt)
        for act in ACTS[1:]:
            add(T.test_activation_any_shape_and_nan, dt, act)
        # softmax: (cols, rows, log); warp per row up to 1024, block per row beyond; vector path when aligned
        for cols, rows, log in [(1, 7, False), (31, 9, True), (33, 1, False), (1000, 9, False), (1024, 3, True),
                                (1025, 2, False), (1032, 2, True)]:  # fmt: skip
            add(T.test_softmax, dt, cols, rows, log)
        for cols in (40, 1100):
            add(T.test_softmax_misaligned_and_strided, dt, cols)
            add(T.test_softmax_special_rows, dt, cols)
        # attention softmax: every mask kind (broadcast over batch, heads, queries), causal and not, both regimes
        for k, kind in enumerate(T.MASKS):
            add(T.test_scaled_masked_softmax, dt, (2, 3, 5, 7), kind, (i + k) % 2 == 0)
        for k, kind in enumerate(["add_key", "bool_q", "add_transposed", "bool_q_col", "none"]):
            add(T.test_scaled_masked_softmax, dt, (1, 2, 9, 40) if k % 2 else (1, 1, 3, 1100), kind, (i + k) % 2 == 1)
        for lk in (6, 1100):
            add(T.test_scaled_masked_softmax_all_masked_rows, dt, lk)
        # normalization: (n, rows, affine)
        for n, rows, affine in [(1, 9, "none"), (33, 9, "dt"), (384, 3, "f32"), (1000, 2, "weight_only"),
                                (1025, 2, "dt"), (1032, 2, "f32")]:  # fmt: skip
            add(T.test_layer_norm, dt, n, rows, affine)
        for n in (49, 384, 1032, 1100):
            add(T.test_standardize_rows_and_moments, dt, n)
        # embedding: (D, id dtype, id shape); 16-byte path when D * itemsize % 16 == 0; D = 301 / 2056 loop over D
        for d, idt, shape in [(1, np.int32, (2, 5)), (31, np.int64, (3,)), (32, np.int32, ()), (384, np.int64, (2, 5)),
                              (301, np.int32, (3,)), (2056, np.int64, (2,))]:  # fmt: skip
            add(T.test_embedding, dt, d, idt, shape)
        # pooling and im2col: the GPU test's small configurations (padding, dilation, ceil windows, strides)
        small = [c for c in T.POOLS if c[0] < 100]
        for c in small:
            for ties in (False, True):
                add(T.test_max_pool2d, dt, c, ties)
        for k, c in enumerate(c for c in small if c[5] == (1, 1)):  # every divisor rule in float32, some in the others
            for include_pad, divisor in [(True, None), (False, None), (True, 3), (False, 3)][: 4 if i == 0 else 1]:
                add(T.test_avg_pool2d, dt, c, include_pad if i == 0 else (i + k) % 2 == 0, divisor)
        for size, hw in [((7, 7), (3, 3)), ((5, 9), (2, 4)), ((4, 4), (4, 4)), ((3, 3), (5, 5)), ((10, 1), (3, 1))]:
            add(T.test_adaptive_avg_pool2d, dt, size, hw)
        for c in T.CONVS:
            add(T.test_im2col, dt, c)
    add(T.test_layer_norm_large_mean_float32, 1000, False)
    add(T.test_layer_norm_large_mean_float32, 1000, True)
    add(T.test_layer_norm_large_mean_float32, 1100, False)
    for fn in (T.test_activation_errors, T.test_softmax_shapes, T.test_scaled_masked_softmax_errors, T.test_norm_errors,
               T.test_embedding_out_of_range, T.test_pool_errors):  # fmt: skip
        add(fn)
    return out


def _name(a: object) -> str:
    if isinstance(a, type):
        return np.dtype(a).name
    if isinstance(a, tuple):
        return "x".join(_name(v) for v in a)
    return str(a)


def prebuild() -> None:
    """Compile every (family, dtype) library in parallel (a cache hit later when cuda_kernels asks for it)."""
    jobs = [(f, d) for f in kernel_sources.FAMILIES for d in kernel_sources.DTYPE_DEFINES]

    def build(job: tuple[str, str]) -> None:
        cupy.RawModule(code=kernel_sources.source(job[0]), options=kernel_sources.options(job[1])).build()

    with ThreadPoolExecutor(max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        list(pool.map(build, jobs))


def main(only: list[str]) -> int:
    faulthandler.enable()  # a kernel that crashes the emulator (misaligned 16-byte access, wild pointer): which case
    t0 = time.perf_counter()
    prebuild()
    t1 = time.perf_counter()
    failures: list[str] = []
    selected = [c for c in cases() if not only or any(s in c[0] for s in only)]
    for cid, fn, args in selected:
        rng = (np.random.default_rng(0),) if "rng" in fn.__code__.co_varnames[: fn.__code__.co_argcount] else ()
        try:
            fn(*rng, *args)
        except BaseException as e:  # pytest.fail / skip raise BaseException subclasses
            if isinstance(e, KeyboardInterrupt):
                raise
            where = traceback.extract_tb(e.__traceback__)[-1]
            failures.append(f"FAIL {cid}: {type(e).__name__}: {str(e)[:600]} (at {Path(where.filename).name}:"
                            f"{where.lineno})".replace("\n", " | "))  # fmt: skip
            print(failures[-1], flush=True)
    if not only:  # every kernel launched for every storage type
        launched = {(name, storage) for name, storage, _, _ in cupy.launches}
        for name in sorted({k for ks in ck.KERNELS.values() for k in ks}):
            for storage in kernel_sources.DTYPE_DEFINES.values():
                if (name, storage) not in launched:
                    failures.append(f"FAIL coverage: kernel {name} never launched for {storage}")
                    print(failures[-1])
    t2 = time.perf_counter()
    print(f"{len(selected)} cases, {len(cupy.launches)} launches; build {t1 - t0:.1f} s, run {t2 - t1:.1f} s")
    print(f"FAILURES {len(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
