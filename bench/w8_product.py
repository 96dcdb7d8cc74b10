"""One weight-only int8 product on one lane (serve.backend.cpu_int8), against the same weights in bf16 and fp32
(serve.backend.cpu_native): the decode-step shape of GPT-2's attention projection, K768 x N1152 by default.

  register  cpu_int8.gemm(bf16=False): sk_gemm_w8, the int8 widened to fp32 in registers, fp32 FMAs
  bf16 rt   cpu_int8.gemm(bf16=True): sk_gemm_w8_bf16, the int8 widened to bf16 a group at a time, vdpbf16ps
  bf16 w    cpu_native.gemm on the weight packed as bfloat16 (twice the int8 bytes)
  fp32 w    cpu_native.gemm on the weight packed as float32

24 weights are cycled so each call reads its weight from memory, as a decode step does; each cell is the median
over rounds of the median call (rounds alternate the sides, so a shared machine's load falls on all of them), in ms
with the wrappers' Python overhead (a few microseconds). The bf16 rows appear only where AVX512-BF16 is loaded.

Usage: python bench/w8_product.py [--k 768] [--n 1152] [--rows 1 4 8 16] [--rounds 3] [--calls 240]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

from serve.backend import cpu_int8, cpu_native


def _median_ms(side: Callable[[np.ndarray, int], object], x: np.ndarray, calls: int) -> float:
    times = []
    for i in range(calls):
        t0 = time.perf_counter()
        side(x, i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--k", type=int, default=768)
    p.add_argument("--n", type=int, default=1152)
    p.add_argument("--rows", type=int, nargs="+", default=[1, 4, 8, 16])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=240)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((args.k, args.n)).astype(np.float32) * 0.02 for _ in range(24)]  # (K, N) each
    q = [cpu_int8.quantize_weight(w) for w in ws]
    sides: dict[str, Callable[[np.ndarray, int], object]] = {
        "register": lambda x, i: cpu_int8.gemm(x, q[i % 24], bf16=False),
        "fp32 w": (lambda pw: lambda x, i: cpu_native.gemm(x, pw[i % 24]))([cpu_native.pack_weight(w) for w in ws]),
    }
    if cpu_int8.bf16_available():
        pw16 = [cpu_native.pack_weight(w, "bfloat16") for w in ws]
        sides["bf16 rt"] = lambda x, i: cpu_int8.gemm(x, q[i % 24], bf16=True)
        sides["bf16 w"] = lambda x, i: cpu_native.gemm(x, pw16[i % 24])
    res: dict[tuple[int, str], list[float]] = {}
    load = os.getloadavg()[0]
    print(f"K{args.k} x N{args.n}, one lane, {cpu_native.isa()}, bf16 {cpu_native.bf16_engine()}, load {load:.1f}")
    for _ in range(args.rounds):
        for m in args.rows:
            x = rng.standard_normal((m, args.k)).astype(np.float32)  # (M, K)
            for name, side in sides.items():
                res.setdefault((m, name), []).append(_median_ms(side, x, args.calls))
    print(f"{'rows':>4} " + " ".join(f"{name:>9}" for name in sides))
    for m in args.rows:
        print(f"{m:>4} " + " ".join(f"{statistics.median(res[(m, name)]):>9.3f}" for name in sides))
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
