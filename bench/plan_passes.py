"""What each pass and kernel of the inference plan buys, measured one step at a time on serve alone.

    .venv/bin/python bench/plan_passes.py                     # ResNet-18 b8, MobileNetV2 b8, MiniLM-L6 b8
    .venv/bin/python bench/plan_passes.py --case "Encoder b8"  # the 6-layer post-LN nn.TransformerEncoder
    .venv/bin/python bench/plan_passes.py --case "ResNet-18 b8" --rounds 7

Each step adds one thing to the one before: eager; the plan's structure alone (the rewritten tree, numpy reference
kernels, no pass); + batch norm folded; + activations fused; + the other passes (channels-last max pool, grouped
products); + the numpy 1x1 GEMM kernel; + serve's native fp32 kernels; + the residual add in the GEMM's epilogue
and the native LayerNorm in the same pass (the "addnorm" pass); + nn.MultiheadAttention's projections planned (the
"attention" pass: the full default plan); + bfloat16 products (where
the CPU has AVX512-BF16). All steps are planned once, then timed in alternated rounds (one serve process: the same
library, so no thread pools compete), and the median call is reported with its ratio to eager and its largest
output difference from eager (relative to the largest |value|). 2 lanes, as bench/runtime.py.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import serve
from serve import nn
from serve.inference import kernels, optimize
from serve.zoo import all_minilm_l6_v2, mobilenet_v2, resnet18

NUMPY_KERNELS = ("gemm_nhwc",)
FP32 = ("gemm_nhwc", "native_nhwc", "native_depthwise", "native")
BEFORE_ADDNORM = ("fold", "fuse", "group", "pool")  # the native LayerNorm and the fused add come with "addnorm"
STEPS: list[tuple[str, dict[str, Any]]] = [
    ("plan structure only", {"passes": (), "kernels": ()}),
    ("+ batch norm folded", {"passes": ("fold",), "kernels": ()}),
    ("+ activations fused", {"passes": ("fold", "fuse"), "kernels": ()}),
    ("+ channels-last pool, grouped products", {"passes": BEFORE_ADDNORM, "kernels": ()}),
    ("+ 1x1 conv as one BLAS product", {"passes": BEFORE_ADDNORM, "kernels": NUMPY_KERNELS}),
    ("+ native fp32 kernels", {"passes": BEFORE_ADDNORM, "kernels": FP32}),
    ("+ residual add in the GEMM, LayerNorm with it", {"passes": BEFORE_ADDNORM + ("addnorm",), "kernels": FP32}),
    ("+ multi-head attention's projections planned (the default plan)", {"kernels": FP32}),
    ("+ bfloat16 products", {"dtype": "bfloat16"}),
]


def _norms(model: nn.Module) -> nn.Module:
    rng = np.random.default_rng(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.running_mean.shape[0]
            m.running_mean._data[:] = rng.standard_normal(c) * 0.1
            m.running_var._data[:] = rng.random(c) + 0.5
    return model.eval()


def case(name: str) -> tuple[nn.Module, tuple]:
    rng = np.random.default_rng(0)
    if name.startswith("MiniLM"):
        model = all_minilm_l6_v2()[0].auto_model.eval()
        ids = serve.from_numpy(rng.integers(1000, 30000, (8, 128)))
        return model, (ids, serve.ones(8, 128, dtype=serve.int64))
    if name.startswith("Encoder"):  # bench/runtime.py's "Encoder 6x384 b8 seq128"
        layer = nn.TransformerEncoderLayer(384, 12, 1536, activation="gelu", batch_first=True)
        model = nn.TransformerEncoder(layer, 6).eval()
        return model, (serve.from_numpy(rng.standard_normal((8, 128, 384), dtype=np.float32)),)
    model = _norms(resnet18() if name.startswith("ResNet") else mobilenet_v2())
    return model, (serve.from_numpy(rng.standard_normal((8, 3, 224, 224), dtype=np.float32)),)


def median_ms(fn: Callable[[], Any], calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def run(name: str, rounds: int, calls: int) -> None:
    model, inputs = case(name)
    steps: list[tuple[str, Callable[[], Any]]] = [("eager", lambda: model(*inputs))]
    for label, options in STEPS:
        if options.get("dtype") == "bfloat16" and not kernels.bf16_products():
            continue
        opt = optimize(model, inputs, **options)
        steps.append((label, lambda opt=opt: opt(*inputs)))
    errors = {label: _error(fn(), steps[0][1]()) for label, fn in steps[1:]}
    times: dict[str, list[float]] = {label: [] for label, _ in steps}
    for r in range(rounds):
        order = steps[r % len(steps) :] + steps[: r % len(steps)]
        for label, fn in order:
            fn()
            times[label].append(median_ms(fn, calls))
    eager = statistics.median(times["eager"])
    print(f"\n{name}\n\n| step | ms | / eager | max error vs eager |\n|---|---:|---:|---:|")
    for label, _ in steps:
        ms = statistics.median(times[label])
        err = f"{errors[label]:.1e}" if label in errors else ""
        print(f"| {label} | {ms:.1f} | {ms / eager:.2f} | {err} |")


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, (tuple, list)) else out


def _error(got: Any, want: Any) -> float:
    """max |got - want| over the first output tensor, relative to its largest |value| (eager fp32 serve, which
    bench/runtime.py finds within 1e-6 of PyTorch's)."""
    a, b = (_first(o).numpy().astype(np.float64) for o in (got, want))
    return float(np.abs(a - b).max() / np.abs(b).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", help="ResNet-18 b8, MobileNetV2 b8, MiniLM-L6 b8 or Encoder b8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    serve.set_num_threads(2)
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), platform.processor())
    nat = kernels.native()
    print(f"serve {serve.__version__}, numpy {np.__version__}, {cpu}, 2 lanes, native kernels: "
          f"{nat.isa() if nat is not None else 'none'}, bf16 products: {kernels.bf16_products()}")  # fmt: skip
    with serve.no_grad():
        for name in args.case or ["ResNet-18 b8", "MobileNetV2 b8", "MiniLM-L6 b8"]:
            run(name, args.rounds, args.calls)


if __name__ == "__main__":
    main()
