"""The AMX column of bench/kernels.py: GFLOP/s of the bf16 GEMM on AMX tiles (serve/backend/native/sk_amx.c, through
cpu_native.gemm on a dtype="bfloat16" packed weight) at the GEMM shapes of the BERT-base-sized encoder (batch 8 x
128 tokens) and of ResNet-50 at batch 8 (its convolutions as im2col GEMMs), against the machine's measured bf16
peak: sk_amx_peak runs TDPBF16PS back to back on tiles already loaded (no memory traffic) on every lane, and the
fraction is the GEMM's share of it. The same shapes on the vdpbf16ps path of the same library (the tiles switched
off for the measurement) give AMX's speed-up over AVX512-BF16.

Where the AMX build is not selected (no AMX, SERVE_AMX=0, or its self-check failed) it prints one line saying so and
why, instead of numbers.

Usage: python bench/amx_gemm.py [--lanes 1 2] [--quick]   (bench/kernels.py prints it after its tables)
"""

from __future__ import annotations

import argparse
import ctypes
import time
from collections.abc import Callable

import numpy as np

from serve.backend import cpu_libraries, cpu_native, cpu_threads

# (model, product, M, K, N)
SHAPES = [
    ("encoder b8x128", "qkv 768>2304", 1024, 768, 2304),
    ("encoder b8x128", "attn out 768>768", 1024, 768, 768),
    ("encoder b8x128", "ffn up 768>3072", 1024, 768, 3072),
    ("encoder b8x128", "ffn down 3072>768", 1024, 3072, 768),
    ("resnet50 b8", "l1 1x1 64>256", 8 * 56 * 56, 64, 256),
    ("resnet50 b8", "l2 3x3 128 (im2col)", 8 * 28 * 28, 9 * 128, 128),
    ("resnet50 b8", "l3 3x3 256 (im2col)", 8 * 14 * 14, 9 * 256, 256),
    ("resnet50 b8", "l4 1x1 512>2048", 8 * 7 * 7, 512, 2048),
]
PEAK_FLOPS_PER_ITER = 4 * 16 * 16 * 32 * 2  # sk_amx_peak: four 16x16x32 tile products per iteration


def _best(fn: Callable[[], object], budget: float) -> float:
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget and len(times) < 30):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def why_not() -> str | None:
    """None when the AMX tile path runs the bf16 products here, else the line to print instead of numbers."""
    if cpu_native.bf16_engine() == "amx":
        return None
    return (f"needs AMX (this CPU: {cpu_libraries.cpu_model()}; bf16 engine: {cpu_native.bf16_engine()}; "
            f"AMX: {cpu_libraries.amx_status()})")  # fmt: skip


def peak_gflops(dll: ctypes.CDLL, lanes: int, budget: float) -> float:
    iters = 200_000
    dll.sk_amx_peak.argtypes = [ctypes.c_int64]
    t = _best(lambda: cpu_threads.parallel(lambda a, b: dll.sk_amx_peak(iters), cpu_threads.spans(lanes)), budget)
    return lanes * iters * PEAK_FLOPS_PER_ITER / t / 1e9


def shape_gflops(dll: ctypes.CDLL, m: int, k: int, n: int, lanes: int, budget: float,
                 rng: np.random.Generator) -> tuple[float, float]:  # fmt: skip
    """GFLOP/s of out[M, N] = a[M, K] @ W[K, N] + bias on `lanes` lanes: on tiles, then on vdpbf16ps."""
    a = rng.standard_normal((m, k), np.float32)  # (M, K)
    packed = cpu_native.pack_weight(rng.standard_normal((k, n), np.float32), "bfloat16")  # (K, N) in panels
    bias, out = rng.standard_normal(n, np.float32), np.empty((m, n), np.float32)

    def run() -> None:
        cpu_threads.parallel(lambda r0, r1: cpu_native.gemm(a, packed, bias, None, "none", out, (r0, r1)),
                             cpu_threads.spans(m, lanes))  # fmt: skip

    flops = 2.0 * m * k * n
    amx = flops / _best(run, budget) / 1e9
    dll.sk_amx_enable(0, 0)
    try:
        vector = flops / _best(run, budget) / 1e9
    finally:
        dll.sk_amx_enable(1, 0)
    return amx, vector


def table(lanes_list: list[int], budget: float) -> None:
    print("## AMX bf16 GEMM (sk_amx.c), GFLOP/s against the measured tile peak\n")
    reason = why_not()
    if reason is not None:
        print(reason + "\n")
        return
    dll = cpu_native.bf16_library()
    assert dll is not None
    dll.sk_amx_enable.argtypes = [ctypes.c_int, ctypes.c_int64]
    rng = np.random.default_rng(0)
    for lanes in lanes_list:
        cpu_threads.set_num_threads(lanes)
        peak = peak_gflops(dll, lanes, budget)
        print(f"### {lanes} lane(s): measured bf16 tile peak {peak:.0f} GFLOP/s\n")
        print("| model | product | M x K x N | AMX GFLOP/s | of peak | vdpbf16ps GFLOP/s | AMX / vdpbf16ps |")
        print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
        for model, name, m, k, n in SHAPES:
            amx, vector = shape_gflops(dll, m, k, n, lanes, budget, rng)
            print(f"| {model} | {name} | {m} x {k} x {n} | {amx:.0f} | {amx / peak:.0%} | {vector:.0f} | "
                  f"{amx / vector:.2f}x |", flush=True)  # fmt: skip
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lanes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--quick", action="store_true", help="shorter timing (0.1 s a measurement)")
    args = parser.parse_args()
    cpu_threads.hold_blas()
    table(args.lanes, 0.1 if args.quick else 0.4)


if __name__ == "__main__":
    main()
