"""The fused attention kernel alone, float32 against its bf16 products (serve.backend.cpu_attention, dtype=...), at
the BERT-base-sized encoder's shape per head (issue 27 item 1).

    .venv/bin/python bench/attention_bf16.py            # L = S = 128, E = 64: one head, and 8 x 12 heads on 2 lanes

One head is one call on one lane (the kernel's own speed); 8 x 12 heads is what one encoder layer at batch 8 runs,
split over the lanes as cpu_attention does. Best of `--reps` blocks of calls, the two dtypes alternating per block
so a burst of other load hits both alike; GFLOP/s counts the two products (4 L S E per head).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "2")

import argparse
import time

import numpy as np

import serve
from serve.backend import cpu_attention, cpu_native


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    serve.set_num_threads(2)
    length, e = args.seq, args.head_dim
    print(f"{cpu_native.isa()}, bf16 engine {cpu_native.bf16_engine()}, L = S = {length}, E = {e}, "
          f"1-minute load average {os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print("| heads | lanes | float32 ms | bf16 ms | float32 GFLOP/s | bf16 GFLOP/s | speed-up |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for batch, heads, calls in [(1, 1, 50), (8, 12, 2)]:
        q, k, v = (rng.standard_normal((batch, heads, length, e), dtype=np.float32) for _ in range(3))
        best = {"float32": float("inf"), "bfloat16": float("inf")}
        for _ in range(args.reps):
            for dtype in best:
                start = time.perf_counter()
                for _ in range(calls):
                    cpu_attention.attention(q, k, v, None, False, True, e**-0.5, dtype=dtype)
                best[dtype] = min(best[dtype], (time.perf_counter() - start) / calls)
        flops = 4 * batch * heads * length * length * e
        lanes = 1 if batch * heads == 1 else 2
        fp, bf = best["float32"], best["bfloat16"]
        print(f"| {batch} x {heads} | {lanes} | {fp * 1e3:.3f} | {bf * 1e3:.3f} | {flops / fp / 1e9:.0f} | "
              f"{flops / bf / 1e9:.0f} | {fp / bf:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
