"""Where the time of serve's inference plan goes on the BERT-base-sized encoder (issue 27 item 4), per kind of step.

    .venv/bin/python bench/encoder_split.py                      # fp32 plan, batch 8 x 128, 5 rounds of 3 calls
    .venv/bin/python bench/encoder_split.py --dtype bfloat16 --batch 1
    .venv/bin/python bench/encoder_split.py --quantization int8     # int8 products (serve.backend.cpu_i8)
    .venv/bin/python bench/encoder_split.py --dtype bfloat16 --attention float32  # the attention's products fp32

The encoder is bench/runtime.py's "Encoder 12x768 (BERT-base-sized)" case: serve's nn.TransformerEncoder, 12
post-LN layers of 768 hidden, 12 heads, 3072 feed-forward, GELU, batch_first, random weights (the split does not
depend on them). It is planned once (serve.inference.optimize), then each planned step is timed from Python, in
the main thread, around the call that runs it (wall time, both lanes working inside it):

  QKV GEMM          the packed (2304, 768) input projection, bias in the epilogue (in_proj)
  attention         the fused softmax(q k^T / sqrt(d)) v kernel, heads written into the out projection's input
                    (a bfloat16 plan's choice of its products' dtype: serve.inference.attention_products;
                    --attention float32 keeps them float32, as before that choice existed)
  out GEMM + LN     the (768, 768) output projection with the residual in its epilogue, then LayerNorm on each
                    lane's rows (norm1: one pass; the LayerNorm part is timed inside the lanes, see below); where
                    the layer's timing chose the BLAS kernel, out_proj computes the product, the add runs apart
  FFN1 GEMM + GELU  the (3072, 768) product, bias and GELU (erf) in the epilogue (linear1)
  FFN2 GEMM + LN    the (768, 3072) product with the residual, then LayerNorm (norm2)
  LayerNorm         the native LayerNorm alone: its time summed over the lanes / lanes (part of the two above)
  rest              the call's time not in any of those: the modules' Python, dropout Skips, reshapes

Each GEMM's GFLOP/s is set against the native fp32 GEMM's peak measured in the same process at the same moment
(M = 1024, K = 768, N = 3072 over the lanes, best of 7), so a loaded machine lowers both alike. The rounds
alternate a peak measurement and a block of calls; medians over rounds are reported.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

import serve
from serve.backend import cpu_attention, cpu_native, cpu_threads
from serve.inference import attention_products, optimize

D, HEADS, FF, LAYERS, SEQ = 768, 12, 3072, 12, 128
KINDS = ("QKV GEMM", "attention", "out GEMM + LN", "FFN1 GEMM + GELU", "FFN2 GEMM + LN", "LayerNorm", "rest")
TIMES: dict[str, float] = defaultdict(float)


def timed(kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[kind] += time.perf_counter() - start

    return call


def instrument(opt: Any) -> None:
    """Timers around each step of the plan (the module docstring's kinds)."""
    for layer in opt.plan.layers:
        attn = layer.self_attn
        attn.in_proj.forward = timed("QKV GEMM", attn.in_proj.forward)
        layer.linear1.forward = timed("FFN1 GEMM + GELU", layer.linear1.forward)
        attn.out_proj.forward = timed("out GEMM + LN", attn.out_proj.forward)  # a BLAS choice computes here
        layer.norm1.forward = timed("out GEMM + LN", layer.norm1.forward)  # a native one here, with the norm
        layer.norm2.forward = timed("FFN2 GEMM + LN", layer.norm2.forward)
    attention_products.cpu_attention = _Timed(cpu_attention, "attention", "attention")  # type: ignore[assignment]
    lanes = cpu_threads.get_num_threads()
    kernel = cpu_native.layer_norm

    def layer_norm(*args: Any, **kwargs: Any) -> Any:  # runs inside the lanes: its share is time / lanes
        start = time.perf_counter()
        try:
            return kernel(*args, **kwargs)
        finally:
            TIMES["LayerNorm"] += (time.perf_counter() - start) / lanes

    cpu_native.layer_norm = layer_norm  # addnorm and PlannedLayerNorm call it through the module


class _Timed:
    """A module stand-in whose one function is timed."""

    def __init__(self, module: Any, name: str, kind: str) -> None:
        self._module, self._name = module, name
        self._fn = timed(kind, getattr(module, name))

    def __getattr__(self, attr: str) -> Any:
        return self._fn if attr == self._name else getattr(self._module, attr)


def gemm_peak(reps: int = 7) -> float:
    """The native fp32 GEMM's GFLOP/s at (1024 x 768) @ (768 x 3072) over the lanes, best of `reps`."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, D), dtype=np.float32)
    packed = cpu_native.pack_weight(rng.standard_normal((D, FF), dtype=np.float32))
    out = np.empty((1024, FF), np.float32)
    spans = cpu_threads.spans(1024, grain=12)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        cpu_threads.parallel(lambda r0, r1: cpu_native.gemm(a, packed, out=out, rows=(r0, r1)), spans)
        best = min(best, time.perf_counter() - start)
    return 2 * 1024 * D * FF / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--quantization", choices=("int8",), help="optimize(..., quantization=): int8 products")
    parser.add_argument("--attention", default="auto", choices=("auto", "float32"),
                        help="float32: the attention's products stay float32 in a bfloat16 plan")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    serve.set_num_threads(2)
    layer = serve.nn.TransformerEncoderLayer(D, HEADS, FF, activation="gelu", batch_first=True)
    model = serve.nn.TransformerEncoder(layer, LAYERS).eval()
    x = serve.from_numpy(np.random.default_rng(0).standard_normal((args.batch, SEQ, D), dtype=np.float32))
    load = os.getloadavg()[0]
    with serve.no_grad():
        opt = optimize(model, (x,), dtype=args.dtype, **({"quantization": args.quantization} if args.quantization
                                                          else {}))  # fmt: skip
        assert opt.optimized, opt.reason
        if args.attention == "float32":
            for layer in opt.plan.layers:  # type: ignore[union-attr]
                layer.self_attn.products.product_dtype = "float32"
        instrument(opt)
        opt(x)
        rows: dict[str, list[float]] = defaultdict(list)
        peaks: list[float] = []
        for _ in range(args.rounds):
            peaks.append(gemm_peak())
            TIMES.clear()
            start = time.perf_counter()
            for _ in range(args.calls):
                opt(x)
            total = (time.perf_counter() - start) / args.calls
            split = {kind: TIMES[kind] / args.calls for kind in KINDS[:-1]}
            split["rest"] = total - sum(v for k, v in split.items() if k != "LayerNorm")
            for kind, seconds in split.items():
                rows[kind].append(seconds)
            rows["total"].append(total)
    m = args.batch * SEQ
    flops = {
        "QKV GEMM": 2 * m * D * 3 * D,
        "out GEMM + LN": 2 * m * D * D,
        "FFN1 GEMM + GELU": 2 * m * D * FF,
        "FFN2 GEMM + LN": 2 * m * FF * D,
        "attention": 4 * args.batch * HEADS * SEQ * SEQ * (D // HEADS),
    }
    peak = statistics.median(peaks)
    total = statistics.median(rows["total"])
    described = opt.describe()
    attention_kernels = sorted({e["kernel"] for e in described["attention"]}) or "float32"
    print(f"serve {serve.__version__}, {described['native']}, products {described['products']} "
          f"({described['product_dtypes']}), batch {args.batch} x {SEQ}, 2 lanes, 1-minute load average {load:.1f} "
          f"at the start, {os.getloadavg()[0]:.1f} at the end; native fp32 GEMM peak here {peak:.0f} GFLOP/s "
          f"(median of the rounds' best); attention products "
          f"{'float32 (--attention float32)' if args.attention == 'float32' else attention_kernels}\n")  # fmt: skip
    print(f"| step (x {LAYERS} layers) | ms per call | share | GFLOP/s | of the fp32 GEMM peak |")
    print("|---|---:|---:|---:|---:|")
    for kind in KINDS:
        ms = statistics.median(rows[kind]) * 1e3
        rate = flops[kind] * LAYERS / (ms / 1e3) / 1e9 if kind in flops and ms > 0 else None
        cells = ("" if rate is None else f"{rate:.0f}", "" if rate is None else f"{100 * rate / peak:.0f}%")
        print(f"| {kind} | {ms:.1f} | {100 * ms / (total * 1e3):.0f}% | {cells[0]} | {cells[1]} |")
    print(f"| total | {total * 1e3:.1f} | 100% | {sum(flops.values()) * LAYERS / total / 1e9:.0f} | |")


if __name__ == "__main__":
    main()
