"""The kernels a planned layer chooses among, each `run(layer, x) -> np.ndarray` with the layer's epilogue applied.

Convolutions:
- `im2col`: the eager backend's convolution (im2col + one BLAS product per block, NCHW), then bias in place; the
  activation runs as the eager module. Always available: the reference the others are checked against.
- `gemm_nhwc`: a 1x1 stride-1 unpadded convolution as one BLAS product over channels-last pixels.
- `native_nhwc` / `native_depthwise`: serve's C kernels (serve.backend.cpu_native) on channels-last input, bias,
  activation and all in the product's epilogue, no im2col copy; split across the lanes by output pixels.
- `native_nhwc_winograd` / `native_nhwc_winograd4`: 3x3 stride-1 convolutions as Winograd F(2x2, 3x3) / F(4x4, 3x3)
  in C (0.44 / 0.25 of the direct multiplications: 1.5-1.8x / 2.0-2.4x the direct kernel on ResNet's 3x3 layers),
  same epilogue; split across the lanes by output blocks. The transforms cost accuracy: ~5e-7 / ~5e-6 relative to
  the largest output on one layer, inside the plan's 1e-4 check, which (per layer, and on the whole model) keeps
  them out wherever they would not be.
- `native_nhwc_bf16` (and `native_bf16` for linear layers): the same with bfloat16 operands and float32
  accumulation, on CPUs with AVX512-BF16, when the plan was asked for bfloat16 products.

Linear layers:
- `blas`: the weight transposed once to (in, out), one BLAS product, bias in place, the activation module.
- `native`: the C GEMM on the packed weight with bias and activation in its epilogue, split by rows.
- `native_int8`: dynamically quantised int8 products (serve.backend.cpu_i8: int8 weights per column, u8 activations
  per row, int32 sums on AVX512-VNNI), same epilogue, split by rows; when the plan was asked for int8 products and
  the layer is not one mixed precision keeps float32.

A channels-last result is returned as its NCHW-shaped view (PyTorch's channels_last memory format), so code
between layers sees the usual shapes and the next planned convolution reads it without a copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from serve.backend import cpu_blas, cpu_i8, cpu_threads, ops_cpu
from serve.inference import arena
from serve.inference.epilogue import add_bias_

if TYPE_CHECKING:
    from serve.inference.planned import PlannedConv2d, PlannedLinear

__all__ = ["CONV_KERNELS", "LINEAR_KERNELS", "native"]

Kernel = Callable[[Any, np.ndarray], np.ndarray]


def native() -> Any:
    """serve.backend.cpu_native when its compiled kernels load on this CPU, else None."""
    try:
        from serve.backend import cpu_native
    except ImportError:
        return None
    return cpu_native if cpu_native.available() else None


def bf16_products() -> bool:
    """Whether this CPU runs the native bfloat16 products (AVX512-BF16)."""
    nat = native()
    return nat is not None and nat.bf16_available()


def _bf16(layer: Any) -> bool:
    """bfloat16 products for this layer: asked for, on a CPU that has them, and not where mixed precision keeps
    float32 (the first and last product layers, and convolutions over fewer than 16 input channels, where the
    bf16 pairs of a tap are mostly padding and the product is no faster)."""
    if layer.product_dtype != "bfloat16" or layer.keep_float32 or not bf16_products():
        return False
    return getattr(layer, "groups", 1) == 1 and layer.weight.shape[1] >= 16


def int8_products() -> bool:
    """Whether this CPU runs the native int8 products (AVX512-VNNI, serve.backend.cpu_i8)."""
    return cpu_i8.available()


def _int8(layer: Any) -> bool:
    """int8 products for this linear layer: asked for, on a CPU with the VNNI kernel, not kept float32 by mixed
    precision (the model's first and last product layers)."""
    return layer.product_dtype == "int8" and not layer.keep_float32 and int8_products()


def channels_last(x: np.ndarray) -> np.ndarray:
    """x (N, C, H, W) as a C-contiguous (N, H, W, C) array: free when x already is a channels-last view."""
    t = x.transpose(0, 2, 3, 1)
    return t if t.flags.c_contiguous else np.ascontiguousarray(t)


def _pixel_spans(pixels: int, flops_per_pixel: int) -> list[tuple[int, int]]:
    if pixels * flops_per_pixel < (1 << 22):  # under ~4 MFLOP one lane is quicker than the hand-off
        return [(0, pixels)]
    return cpu_threads.spans(pixels, grain=12)


# ---- convolution -------------------------------------------------------------------------------------------
def conv_im2col(layer: PlannedConv2d, x: np.ndarray) -> np.ndarray:
    y = ops_cpu.conv2d(x, layer.weight, None, layer.stride, layer.padding, layer.dilation, layer.groups)
    add_bias_(y, layer.bias, 1)
    return y


def conv_gemm_nhwc(layer: PlannedConv2d, x: np.ndarray) -> np.ndarray:
    xl = channels_last(x)
    n, h, w, c = xl.shape
    y = cpu_blas.matmul(xl.reshape(-1, c), layer.weight_kn())  # (N*H*W, OC)
    add_bias_(y, layer.bias, 1)
    return y.reshape(n, h, w, -1).transpose(0, 3, 1, 2)


def conv_native(layer: PlannedConv2d, x: np.ndarray, dtype: str = "float32", residual: np.ndarray | None = None,
                act: str | None = None) -> np.ndarray:  # fmt: skip
    """`residual` (N, OC, OH, OW, any layout) is added in the epilogue before `act` (default: the layer's own)."""
    nat = native()
    xl = channels_last(x)
    n = xl.shape[0]
    oh, ow = layer.out_size(xl.shape[1], xl.shape[2])
    out = arena.empty(layer, (n, oh, ow, layer.out_channels))
    packed = layer.packed(dtype)
    per_pixel = 2 * layer.weight.shape[1] * layer.weight.shape[2] * layer.weight.shape[3] * layer.out_channels

    res = None if residual is None else channels_last(residual)
    act = (layer.act or "none") if act is None else act

    def part(p0: int, p1: int) -> None:
        nat.conv2d_nhwc(xl, packed, layer.kernel, layer.stride, layer.padding, layer.dilation, bias=layer.bias,
                        residual=res, act=act, out=out, pixels=(p0, p1))  # fmt: skip

    cpu_threads.parallel(part, _pixel_spans(n * oh * ow, per_pixel))
    return out.transpose(0, 3, 1, 2)


def conv_winograd(layer: PlannedConv2d, x: np.ndarray, residual: np.ndarray | None = None,
                  act: str | None = None, m: int = 2) -> np.ndarray:  # fmt: skip
    """As conv_native, by Winograd F(m x m, 3x3) (3x3, stride 1, dilation 1, groups 1)."""
    nat = native()
    xl = channels_last(x)
    n = xl.shape[0]
    oh, ow = layer.out_size(xl.shape[1], xl.shape[2])
    out = arena.empty(layer, (n, oh, ow, layer.out_channels))
    packed = layer.packed("winograd" if m == 2 else f"winograd{m}")
    res = None if residual is None else channels_last(residual)
    act = (layer.act or "none") if act is None else act
    tiles = nat.winograd_tiles(n, oh, ow, m)
    per_tile = 2 * (m + 2) ** 2 * layer.weight.shape[1] * layer.out_channels

    def part(t0: int, t1: int) -> None:
        nat.winograd_nhwc(xl, packed, layer.padding, bias=layer.bias, residual=res, act=act, out=out, tiles=(t0, t1))

    cpu_threads.parallel(part, _pixel_spans(tiles, per_tile))
    return out.transpose(0, 3, 1, 2)


def _winograd_applies(layer: PlannedConv2d) -> bool:
    return (native() is not None and layer.groups == 1 and layer.kernel == (3, 3) and layer.stride == (1, 1)
            and layer.dilation == (1, 1))  # fmt: skip


def conv_native_depthwise(layer: PlannedConv2d, x: np.ndarray) -> np.ndarray:
    nat = native()
    xl = channels_last(x)
    n = xl.shape[0]
    oh, ow = layer.out_size(xl.shape[1], xl.shape[2])
    out = arena.empty(layer, (n, oh, ow, layer.out_channels))
    per_pixel = 2 * layer.weight.shape[2] * layer.weight.shape[3] * layer.out_channels

    def part(p0: int, p1: int) -> None:
        nat.depthwise_nhwc(xl, layer.weight, layer.kernel, layer.stride, layer.padding, layer.dilation,
                           bias=layer.bias, act=layer.act or "none", out=out, pixels=(p0, p1))  # fmt: skip

    cpu_threads.parallel(part, _pixel_spans(n * oh * ow, per_pixel * 8))
    return out.transpose(0, 3, 1, 2)


def packing(name: str) -> str | None:
    """The packed weight (PlannedConv2d/PlannedLinear.packed's key) kernel `name` reads, None for the BLAS ones."""
    if not name.startswith("native"):
        return None
    if "_winograd" in name:
        return name.removeprefix("native_nhwc_")
    return "bfloat16" if name.endswith("_bf16") else "int8" if name.endswith("_int8") else "float32"


# name -> (kernel, whether it applies the activation itself, whether it can run this layer)
CONV_KERNELS: dict[str, tuple[Kernel, bool, Callable[[PlannedConv2d], bool]]] = {
    "im2col": (conv_im2col, False, lambda layer: True),
    "gemm_nhwc": (conv_gemm_nhwc, False, lambda layer: layer.is_pointwise()),
    "native_nhwc": (conv_native, True, lambda layer: native() is not None and layer.groups == 1),
    "native_nhwc_winograd": (conv_winograd, True, _winograd_applies),
    "native_nhwc_winograd4": (lambda layer, x: conv_winograd(layer, x, m=4), True, _winograd_applies),
    "native_depthwise": (conv_native_depthwise, True, lambda layer: native() is not None and layer.is_depthwise()),
    "native_nhwc_bf16": (
        lambda layer, x: conv_native(layer, x, "bfloat16"),
        True,
        lambda layer: layer.groups == 1 and _bf16(layer),
    ),
}


# ---- linear ------------------------------------------------------------------------------------------------
def linear_blas(layer: PlannedLinear, x2: np.ndarray) -> np.ndarray:
    y = cpu_blas.matmul(x2, layer.weight_kn())
    add_bias_(y, layer.bias, 1)
    return y


def linear_native(layer: PlannedLinear, x2: np.ndarray, dtype: str = "float32") -> np.ndarray:
    nat = native()
    m = x2.shape[0]
    out = arena.empty(layer, (m, layer.out_features))
    packed = layer.packed(dtype)

    gemm = cpu_i8.gemm if dtype == "int8" else nat.gemm

    def part(r0: int, r1: int) -> None:
        gemm(x2, packed, bias=layer.bias, act=layer.act or "none", out=out, rows=(r0, r1))

    cpu_threads.parallel(part, _pixel_spans(m, 2 * layer.in_features * layer.out_features))
    return out


LINEAR_KERNELS: dict[str, tuple[Kernel, bool, Callable[[PlannedLinear], bool]]] = {
    "blas": (linear_blas, False, lambda layer: True),
    "native": (linear_native, True, lambda layer: native() is not None),
    "native_bf16": (lambda layer, x: linear_native(layer, x, "bfloat16"), True, lambda layer: _bf16(layer)),
    "native_int8": (lambda layer, x: linear_native(layer, x, "int8"), True, _int8),
}
