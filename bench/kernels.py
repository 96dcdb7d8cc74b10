"""GFLOP/s of the native CPU kernels (serve.backend.cpu_native) against numpy on ResNet-18, ResNet-50 and
MobileNetV2 layer shapes, at batch 8 and 1, on one lane and on two (cpu_threads.parallel over cpu_threads.spans).

  conv      native implicit-GEMM conv2d_nhwc, bias + ReLU fused
  im2col    NHWC im2col copy + np.matmul (OpenBLAS, one thread per lane) + bias + ReLU in numpy
  gemm      native gemm on the im2col matrix (the GEMM alone, bias + ReLU fused)
  matmul    np.matmul on the im2col matrix (the GEMM alone)
  conv bf16 conv2d_nhwc on a pack_conv_weight(dtype="bfloat16"): x rounded to bf16 per call, vdpbf16ps (fp32
            accumulation), bias + ReLU fused; bf16/fp32 is its ratio to conv; gemm bf16 likewise on the im2col matrix
            (only where the CPU has AVX512-BF16)
Depthwise layers compare depthwise_nhwc with numpy summing the k*k shifted views.
Max pooling (ResNet stem, (N, 112, 112, 64) 3x3/2 pad 1): max_pool_nhwc against a numpy separable max (-inf pad,
the max of 3 strided column views, then of 3 strided row views), in ms.
Last, the AMX table (bench/amx_gemm.py): the bf16 GEMM on AMX tiles at the encoder's and ResNet-50's GEMM shapes
against the measured tile peak, and against vdpbf16ps; one "needs AMX" line on a CPU where it is not selected.

Usage: python bench/kernels.py [--batch 8 1] [--lanes 1 2] [--quick] [--pool-only]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from serve.backend import cpu_native, cpu_threads

sys.path.insert(0, str(Path(__file__).resolve().parent))
import amx_gemm

# (net, name, in_hw, C, OC, k, stride, depthwise)
LAYERS = [
    ("resnet18", "conv1 7x7/2", 224, 3, 64, 7, 2, False),
    ("resnet18", "layer1 3x3", 56, 64, 64, 3, 1, False),
    ("resnet18", "layer2 3x3/2", 56, 64, 128, 3, 2, False),
    ("resnet18", "layer2 3x3", 28, 128, 128, 3, 1, False),
    ("resnet18", "layer3 3x3", 14, 256, 256, 3, 1, False),
    ("resnet18", "layer4 3x3", 7, 512, 512, 3, 1, False),
    ("resnet50", "l1 1x1 64>256", 56, 64, 256, 1, 1, False),
    ("resnet50", "l1 1x1 256>64", 56, 256, 64, 1, 1, False),
    ("resnet50", "l3 1x1 1024>256", 14, 1024, 256, 1, 1, False),
    ("resnet50", "l3 3x3 256", 14, 256, 256, 3, 1, False),
    ("resnet50", "l4 1x1 512>2048", 7, 512, 2048, 1, 1, False),
    ("mobilenetv2", "stem 3x3/2", 224, 3, 32, 3, 2, False),
    ("mobilenetv2", "expand 1x1 24>144", 56, 24, 144, 1, 1, False),
    ("mobilenetv2", "dw 3x3 144", 56, 144, 144, 3, 1, True),
    ("mobilenetv2", "project 1x1 144>24", 56, 144, 24, 1, 1, False),
    ("mobilenetv2", "dw 3x3/2 576", 14, 576, 576, 3, 2, True),
    ("mobilenetv2", "1x1 320>1280", 7, 320, 1280, 1, 1, False),
]


def best_time(fn: Callable[[], object], budget: float) -> float:
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget and len(times) < 50):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def im2col_rows(xp: np.ndarray, k: int, s: int, oh: int, ow: int, n: int, y0: int, y1: int) -> np.ndarray:
    """The im2col rows of output rows y0..y1 of sample n: (rows * ow, k * k * C), K ordered (kh, kw, ic)."""
    win = sliding_window_view(xp[n], (k, k), axis=(0, 1))[::s, ::s][y0:y1, :ow]  # (rows, ow, C, kh, kw)
    return np.ascontiguousarray(win.transpose(0, 1, 3, 4, 2)).reshape((y1 - y0) * ow, -1)


def bench_layer(layer: tuple, batch: int, lanes: int, budget: float) -> dict[str, float]:
    _, _, hw, c, oc, k, s, dw = layer
    rng = np.random.default_rng(0)
    p = k // 2
    oh = (hw + 2 * p - k) // s + 1
    pixels = batch * oh * oh
    x = rng.standard_normal((batch, hw, hw, c)).astype(np.float32)
    bias = rng.standard_normal(oc).astype(np.float32)
    out = np.empty((batch, oh, oh, oc), np.float32)
    geo = ((k, k), (s, s), (p, p, p, p), (1, 1))
    pix_spans = cpu_threads.spans(pixels, lanes)
    row_spans = cpu_threads.spans(batch * oh, lanes)
    xp = np.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
    if dw:
        w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
        flops = 2.0 * pixels * c * k * k

        def native() -> None:
            cpu_threads.parallel(lambda a, b: cpu_native.depthwise_nhwc(x, w, *geo, bias, None, "relu", out, (a, b)),
                                 pix_spans)  # fmt: skip

        def numpy_rows(r0: int, r1: int) -> None:
            for n in range(r0 // oh, (r1 - 1) // oh + 1):
                y0, y1 = max(r0 - n * oh, 0), min(r1 - n * oh, oh)
                acc = np.zeros((y1 - y0, oh, c), np.float32)
                for ky in range(k):
                    for kx in range(k):
                        rows = xp[n, y0 * s + ky : (y1 - 1) * s + ky + 1 : s, kx : kx + (oh - 1) * s + 1 : s]
                        acc += rows * w[:, 0, ky, kx]
                np.maximum(acc + bias, 0, out=out[n, y0:y1])

        def shifted() -> None:
            cpu_threads.parallel(numpy_rows, row_spans)

        return {"flops": flops, "conv": flops / best_time(native, budget) / 1e9,
                "im2col": flops / best_time(shifted, budget) / 1e9}  # fmt: skip
    w = rng.standard_normal((oc, c, k, k)).astype(np.float32)
    packed = cpu_native.pack_conv_weight(w)
    w_kn = np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(-1, oc))
    packed_bf16 = cpu_native.pack_conv_weight(w, "bfloat16") if cpu_native.bf16_available() else None
    gemm_packed_bf16 = cpu_native.pack_weight(w_kn, "bfloat16") if packed_bf16 is not None else None  # K unpadded
    flops = 2.0 * pixels * oc * c * k * k
    cols = np.concatenate([im2col_rows(xp, k, s, oh, oh, n, 0, oh) for n in range(batch)])
    flat = out.reshape(pixels, oc)

    def conv() -> None:
        cpu_threads.parallel(lambda a, b: cpu_native.conv2d_nhwc(x, packed, *geo, bias, None, "relu", out, (a, b)),
                             pix_spans)  # fmt: skip

    def im2col_part(r0: int, r1: int) -> None:
        for n in range(r0 // oh, (r1 - 1) // oh + 1):
            y0, y1 = max(r0 - n * oh, 0), min(r1 - n * oh, oh)
            dst = flat[(n * oh + y0) * oh : (n * oh + y1) * oh]
            np.matmul(im2col_rows(xp, k, s, oh, oh, n, y0, y1), w_kn, out=dst)
            dst += bias
            np.maximum(dst, 0, out=dst)

    def gemm() -> None:
        cpu_threads.parallel(lambda a, b: cpu_native.gemm(cols, packed, bias, None, "relu", flat, (a, b)), pix_spans)

    def matmul() -> None:
        cpu_threads.parallel(lambda a, b: np.matmul(cols[a:b], w_kn, out=flat[a:b]), pix_spans)

    def im2col() -> None:
        cpu_threads.parallel(im2col_part, row_spans)

    def conv_bf16() -> None:
        cpu_threads.parallel(lambda a, b: cpu_native.conv2d_nhwc(x, packed_bf16, *geo, bias, None, "relu", out,
                                                                 (a, b)), pix_spans)  # fmt: skip

    def gemm_bf16() -> None:
        cpu_threads.parallel(lambda a, b: cpu_native.gemm(cols, gemm_packed_bf16, bias, None, "relu", flat, (a, b)),
                             pix_spans)  # fmt: skip

    fns: list[tuple[str, Callable[[], None]]] = [("conv", conv), ("im2col", im2col), ("gemm", gemm), ("matmul", matmul)]
    if packed_bf16 is not None:
        fns += [("conv_bf16", conv_bf16), ("gemm_bf16", gemm_bf16)]  # the pair timed after the fp32 ones
    return {"flops": flops, **{name: flops / best_time(fn, budget) / 1e9 for name, fn in fns}}


def bench_pool(batch: int, lanes: int, budget: float) -> dict[str, float]:
    """ms of the ResNet stem max pool (batch, 112, 112, 64) 3x3/2 pad 1: native, and numpy separable."""
    x = np.random.default_rng(0).standard_normal((batch, 112, 112, 64)).astype(np.float32)
    oh = 56
    out = np.empty((batch, oh, oh, 64), np.float32)
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-np.inf)

    def numpy_rows(r0: int, r1: int) -> None:
        for n in range(r0 // oh, (r1 - 1) // oh + 1):
            y0, y1 = max(r0 - n * oh, 0), min(r1 - n * oh, oh)
            rows = xp[n, 2 * y0 : 2 * (y1 - 1) + 3]
            cols = np.maximum(rows[:, 0 : 2 * oh - 1 : 2], rows[:, 1 : 2 * oh : 2])
            np.maximum(cols, rows[:, 2 : 2 * oh + 1 : 2], out=cols)
            dst = out[n, y0:y1]
            np.maximum(cols[0 : 2 * (y1 - y0) - 1 : 2], cols[1 : 2 * (y1 - y0) : 2], out=dst)
            np.maximum(dst, cols[2 : 2 * (y1 - y0) + 1 : 2], out=dst)

    pix_spans, row_spans = cpu_threads.spans(batch * oh * oh, lanes), cpu_threads.spans(batch * oh, lanes)

    def native() -> None:
        cpu_threads.parallel(lambda a, b: cpu_native.max_pool_nhwc(x, 3, 2, 1, out, (a, b)), pix_spans)

    def separable() -> None:
        cpu_threads.parallel(numpy_rows, row_spans)

    native()
    ref = out.copy()
    separable()
    assert np.array_equal(out, ref), "max_pool_nhwc and the numpy separable max disagree"
    return {"native": best_time(native, budget) * 1e3, "numpy": best_time(separable, budget) * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, nargs="+", default=[8, 1])
    parser.add_argument("--lanes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--quick", action="store_true", help="shorter timing (0.1 s a measurement)")
    parser.add_argument("--pool-only", action="store_true", help="only the max pooling table")
    args = parser.parse_args()
    if not cpu_native.available():
        raise SystemExit("native kernels not available (built? SERVE_NATIVE=0?)")
    cpu_threads.hold_blas()
    budget = 0.1 if args.quick else 0.4
    bf16 = cpu_native.bf16_available()
    print(f"native build: {cpu_native.isa()}; bf16 build: {bf16}; "
          f"BLAS held to one thread per lane: {cpu_threads.blas_controlled()}\n")  # fmt: skip
    print("## max pool (N, 112, 112, 64) 3x3/2 pad 1, ms (lower is better)\n")
    print("| batch | lanes | max_pool_nhwc | numpy separable | speed-up |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for lanes in args.lanes:
        cpu_threads.set_num_threads(lanes)
        for batch in args.batch:
            r = bench_pool(batch, lanes, budget)
            print(f"| {batch} | {lanes} | {r['native']:.2f} | {r['numpy']:.2f} | {r['numpy'] / r['native']:.2f}x |",
                  flush=True)  # fmt: skip
    print()
    if args.pool_only:
        return
    print("GFLOP/s (higher is better); depthwise rows: conv = depthwise_nhwc, im2col = numpy shifted views\n")
    for lanes in args.lanes:
        cpu_threads.set_num_threads(lanes)
        for batch in args.batch:
            print(f"## batch {batch}, {lanes} lane(s)\n")
            extra = " conv bf16 | bf16/fp32 | gemm bf16 |" if bf16 else ""
            print("| net | layer | MFLOP | conv | im2col+matmul | speed-up | gemm | np.matmul |" + extra)
            print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |" + " ---: |" * (3 if bf16 else 0))
            for layer in LAYERS:
                r = bench_layer(layer, batch, lanes, budget)
                gemm = f"{r['gemm']:.1f} | {r['matmul']:.1f}" if "gemm" in r else "- | -"
                cols = ""
                if bf16:
                    cols = (f" {r['conv_bf16']:.1f} | {r['conv_bf16'] / r['conv']:.2f}x | {r['gemm_bf16']:.1f} |"
                            if "conv_bf16" in r else " - | - | - |")  # fmt: skip
                print(f"| {layer[0]} | {layer[1]} | {r['flops'] / 1e6:.0f} | {r['conv']:.1f} | {r['im2col']:.1f} | "
                      f"{r['conv'] / r['im2col']:.2f}x | {gemm} |{cols}", flush=True)  # fmt: skip
            print()
    amx_gemm.table(args.lanes, budget)


if __name__ == "__main__":
    main()
