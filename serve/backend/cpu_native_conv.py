"""The convolution and pooling wrappers of the native kernels (serve_kernels.c): implicit-GEMM NHWC convolution on a
packed weight (fp32 or bf16), Winograd F(2x2, 3x3) / F(4x4, 3x3) with its weight transform, depthwise convolution and
max pooling, each with the epilogue fused and a span of output pixels (or Winograd blocks) per lane.

Why a module of their own: cpu_native keeps which build runs, the GEMM, LayerNorm and the argument checks they all
share; these wrappers are the image half. They are re-exported by cpu_native (callers use `cpu_native.conv2d_nhwc`
etc., one namespace for the kernels), which imports this module last, after the helpers it takes from there exist:
import it through cpu_native, not first on its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from serve.backend.cpu_native import PackedWeight, _check, _epilogue, _kernel, _need, _output, _pack, _span

__all__ = ["conv2d_nhwc", "depthwise_nhwc", "max_pool_nhwc", "pack_winograd_weight", "winograd_nhwc", "winograd_tile",
           "winograd_tiles"]  # fmt: skip


def _conv_geometry(op: str, x: Any, kernel: Any, stride: Any, padding: Any, dilation: Any) -> tuple[int, ...]:
    _check(f"{op} x", x)
    if x.ndim != 4:
        raise ValueError(f"{op}: expected x (N, H, W, C), got shape {x.shape}")
    try:
        (kh, kw), (sh, sw), (dh, dw) = (tuple(int(v) for v in p) for p in (kernel, stride, dilation))
        pt, pb, pl, pr = (int(v) for v in padding)
    except (TypeError, ValueError):
        raise ValueError(f"{op}: kernel/stride/dilation are (h, w) pairs, padding (top, bottom, left, right)") from None
    if min(kh, kw, sh, sw, dh, dw) < 1 or min(pt, pb, pl, pr) < 0:
        raise ValueError(f"{op}: bad geometry kernel={kernel} stride={stride} padding={padding} dilation={dilation}")
    h, w = x.shape[1:3]
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise ValueError(f"{op}: output would be empty for input {x.shape} and kernel {kernel}")
    return kh, kw, sh, sw, pt, pl, dh, dw, oh, ow


def conv2d_nhwc(
    x: np.ndarray,
    packed: PackedWeight,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int, int, int],
    dilation: tuple[int, int],
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    act: str = "none",
    out: np.ndarray | None = None,
    pixels: tuple[int, int] | None = None,
) -> np.ndarray:
    """NHWC convolution (groups=1) of x (N, H, W, C) by a pack_conv_weight: out (N, OH, OW, OC) =
    act(conv + bias + residual). `pixels=(p0, p1)` computes only those of the flattened N*OH*OW output pixels.
    A bfloat16 weight rounds x to bf16 on the fly (the input rows this call's pixels read)."""
    _, fn = _kernel("conv2d_nhwc", packed)
    geo = _conv_geometry("conv2d_nhwc", x, kernel, stride, padding, dilation)
    kh, kw, *_, oh, ow = geo
    nb, h, w, c = x.shape
    if packed.k != kh * kw * c:
        raise ValueError(f"conv2d_nhwc: packed K={packed.k} does not match kernel {kh}x{kw} x {c} input channels")
    if packed.dtype == "bfloat16" and packed.kpad != kh * kw * (c + c % 2):
        raise ValueError("conv2d_nhwc: a bfloat16 weight packed without per-tap padding; use pack_conv_weight")
    oc = packed.n
    shape = (nb, oh, ow, oc)
    b, r, code = _epilogue("conv2d_nhwc", oc, shape, bias, residual, act)
    out = _output("conv2d_nhwc", out, shape)
    p0, p1 = _span("conv2d_nhwc", pixels, nb * oh * ow)
    if p1 > p0 and fn(x.ctypes.data, nb, h, w, c, packed.data.ctypes.data, oc, *geo, b, r, out.ctypes.data, code,
                      p0, p1):  # fmt: skip
        raise MemoryError("conv2d_nhwc: out of memory for the tap pointers / bf16 input")
    return out


# Winograd F(m x m, 3x3): U = G g G^T turns each 3x3 filter into the (m + 2) x (m + 2) one that the transformed
# input tiles multiply (Lavin & Gray's matrices; the C kernel holds B^T and A^T)
_WINO_G = {
    2: np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]]),
    4: np.array([[1 / 4, 0.0, 0.0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                 [1 / 24, -1 / 12, 1 / 6], [0.0, 0.0, 1.0]]),
}  # fmt: skip


def pack_winograd_weight(w: np.ndarray, m: int = 2) -> PackedWeight:
    """Transform a 3x3 conv weight (OC, IC, 3, 3) for winograd_nhwc's F(m x m, 3x3) (m = 2 or 4) and pack its
    (m + 2)^2 (IC, OC) matrices in panels: data ((m + 2)^2, panels, IC, nr), computed in float64, rounded once."""
    w = np.asarray(w)
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        raise ValueError(f"pack_winograd_weight: expected a 3x3 conv weight (OC, IC, 3, 3), got shape {w.shape}")
    if m not in _WINO_G:
        raise ValueError(f"pack_winograd_weight: output tile m={m}; expected 2 or 4")
    g = _WINO_G[m]
    u = np.einsum("ai,ocij,bj->abco", g, w.astype(np.float64), g).astype(np.float32)  # (a, a, IC, OC)
    packs = [_pack("pack_winograd_weight", u[i, j][None], "float32") for i in range(m + 2) for j in range(m + 2)]
    return PackedWeight(np.stack([p.data for p in packs]), w.shape[1], w.shape[0], packs[0].nr)


def winograd_tile(packed: PackedWeight) -> int:
    """The output tile m of a pack_winograd_weight: 2 or 4."""
    return {16: 2, 36: 4}.get(packed.data.shape[0], 0) if packed.data.ndim == 4 else 0


def winograd_nhwc(
    x: np.ndarray,
    packed: PackedWeight,
    padding: tuple[int, int, int, int],
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    act: str = "none",
    out: np.ndarray | None = None,
    tiles: tuple[int, int] | None = None,
) -> np.ndarray:
    """3x3 stride-1 NHWC convolution of x (N, H, W, C) by Winograd F(m x m, 3x3), with pack_winograd_weight's
    weight (its m): out (N, OH, OW, OC) = act(conv + bias + residual). `tiles=(t0, t1)` computes only those
    m x m output blocks of the flattened (N, ceil(OH / m), ceil(OW / m)) (`winograd_tiles` counts them)."""
    lib = _need()
    m = winograd_tile(packed)
    if packed.dtype != "float32" or not m or packed.nr != lib.nr:
        raise ValueError("winograd_nhwc: expected a weight from pack_winograd_weight for the loaded build")
    _, _, _, _, pt, pl, _, _, oh, ow = _conv_geometry("winograd_nhwc", x, (3, 3), (1, 1), padding, (1, 1))
    nb, h, w, c = x.shape
    if packed.k != c:
        raise ValueError(f"winograd_nhwc: the weight has {packed.k} input channels, x has {c}")
    oc = packed.n
    shape = (nb, oh, ow, oc)
    b, r, code = _epilogue("winograd_nhwc", oc, shape, bias, residual, act)
    out = _output("winograd_nhwc", out, shape)
    t0, t1 = _span("winograd_nhwc", tiles, winograd_tiles(nb, oh, ow, m))
    if t1 > t0 and lib.winograd(x.ctypes.data, nb, h, w, c, packed.data.ctypes.data, oc, pt, pl, oh, ow, b, r,
                                out.ctypes.data, code, t0, t1, m):  # fmt: skip
        raise MemoryError("winograd_nhwc: out of memory for the transformed tiles")
    return out


def winograd_tiles(nb: int, oh: int, ow: int, m: int = 2) -> int:
    """How many m x m output blocks winograd_nhwc splits an (nb, oh, ow) output into."""
    return nb * (-(-oh // m)) * (-(-ow // m))


def depthwise_nhwc(
    x: np.ndarray,
    w: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int, int, int],
    dilation: tuple[int, int],
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    act: str = "none",
    out: np.ndarray | None = None,
    pixels: tuple[int, int] | None = None,
) -> np.ndarray:
    """Depthwise NHWC convolution (groups = C = OC) of x (N, H, W, C) by w (C, 1, KH, KW), epilogue fused."""
    lib = _need()
    geo = _conv_geometry("depthwise_nhwc", x, kernel, stride, padding, dilation)
    kh, kw, *_, oh, ow = geo
    nb, h, wd, c = x.shape
    _check("depthwise_nhwc w", w, (c, 1, kh, kw))
    taps = np.ascontiguousarray(w.reshape(c, kh * kw).T)  # (KH*KW, C): a tap's weights contiguous along channels
    shape = (nb, oh, ow, c)
    b, r, code = _epilogue("depthwise_nhwc", c, shape, bias, residual, act)
    out = _output("depthwise_nhwc", out, shape)
    p0, p1 = _span("depthwise_nhwc", pixels, nb * oh * ow)
    if p1 > p0:
        lib.depthwise(x.ctypes.data, nb, h, wd, c, taps.ctypes.data, *geo, b, r, out.ctypes.data, code, p0, p1)
    return out


def _pair(op: str, name: str, v: Any) -> tuple[int, int]:
    try:
        t = (int(v), int(v)) if np.ndim(v) == 0 else tuple(int(i) for i in v)
    except (TypeError, ValueError):
        t = ()
    if len(t) != 2:
        raise ValueError(f"{op}: {name} is an int or an (h, w) pair, got {v!r}")
    return t[0], t[1]


def max_pool_nhwc(
    x: np.ndarray,
    kernel: int | tuple[int, int],
    stride: int | tuple[int, int] | None,
    padding: int | tuple[int, ...],
    out: np.ndarray | None = None,
    pixels: tuple[int, int] | None = None,
) -> np.ndarray:
    """Max pooling of x (N, H, W, C) float32, PyTorch semantics: padding counts as -inf, dilation 1, floor mode.
    kernel / stride are ints or (h, w) pairs (stride None = kernel); padding an int, (h, w), or (top, bottom, left,
    right), each smaller than the kernel. out (N, OH, OW, C); `pixels=(p0, p1)` as in conv2d_nhwc. A NaN in a
    window gives NaN, as in PyTorch."""
    lib = _need()
    op = "max_pool_nhwc"
    kh, kw = _pair(op, "kernel", kernel)
    sh, sw = _pair(op, "stride", kernel if stride is None else stride)
    pads: tuple[int, ...] = ()
    if np.size(padding) in (1, 2):
        ph, pw = _pair(op, "padding", padding)
        pads = (ph, ph, pw, pw)
    elif np.size(padding) == 4:
        pads = tuple(int(v) for v in np.ravel(padding))
    if len(pads) != 4:
        raise ValueError(f"{op}: padding is an int, (h, w) or (top, bottom, left, right), got {padding!r}")
    if max(pads[:2]) >= kh or max(pads[2:]) >= kw:
        raise ValueError(f"{op}: padding {padding} must be smaller than the kernel {kernel}")
    _, _, sh, sw, pt, pl, _, _, oh, ow = _conv_geometry(op, x, (kh, kw), (sh, sw), pads, (1, 1))
    nb, h, w, c = x.shape
    out = _output(op, out, (nb, oh, ow, c))
    p0, p1 = _span(op, pixels, nb * oh * ow)
    if p1 > p0 and c > 0:
        lib.maxpool(x.ctypes.data, nb, h, w, c, kh, kw, sh, sw, pt, pl, oh, ow, out.ctypes.data, p0, p1)
    return out
