"""Resizing a tensor image (..., H, W) in numpy, with the sampling of PyTorch's `interpolate` that torchvision's
tensor path calls.

Every mode is separable: one (out, in) weight matrix per axis, applied as `Wh @ x @ Ww.T`. The matrices follow
PyTorch's definitions (half-pixel centres, `align_corners=False`):
- antialias (bilinear / bicubic): each output pixel averages the input under a filter stretched by the scale
  when shrinking (triangle for bilinear, Keys cubic with a = -0.5 for bicubic), weights normalised to sum 1;
  this is the filter Pillow uses too, so tensors and PIL images resize alike;
- bilinear without antialias: the two neighbours of `(i + 0.5) * scale - 0.5` (clamped at 0);
- bicubic without antialias: four neighbours, Keys cubic with a = -0.75, indices clamped at the borders;
- nearest: `floor(i * scale)`; nearest-exact: `floor((i + 0.5) * scale)`, gathered without arithmetic.
Integer images are computed in float32 and rounded back (bicubic clamped to the dtype's range first), as
torchvision v1 does after `interpolate`; torchvision v2 resizes uint8 with PyTorch's native uint8 kernels, which
round to uint8 between the two passes (see `uint8_passes`): for bicubic, whose overshoot is clamped in between,
the two differ by up to ~25 levels at sharp edges, so each API follows its own.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

_Filter = Callable[[np.ndarray], np.ndarray]


def _triangle(x: np.ndarray) -> np.ndarray:
    return np.maximum(0.0, 1.0 - np.abs(x))


def _keys_cubic(a: float) -> _Filter:
    def f(x: np.ndarray) -> np.ndarray:
        x = np.abs(x)
        near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        far = (((x - 5.0) * x + 8.0) * x - 4.0) * a
        return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))

    return f


def _antialias_weights(n_in: int, n_out: int, kernel: _Filter, taps: int) -> np.ndarray:
    """(n_out, n_in): the filter centred on each output pixel, widened by the scale when downsampling."""
    scale = n_in / n_out
    support = taps / 2 * scale if scale >= 1.0 else taps / 2
    inv = 1.0 / scale if scale >= 1.0 else 1.0
    weights = np.zeros((n_out, n_in))
    for i in range(n_out):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in)
        w = kernel((np.arange(lo, hi) - center + 0.5) * inv)
        total = w.sum()
        weights[i, lo:hi] = w / total if total != 0 else w
    return weights


def _bilinear_weights(n_in: int, n_out: int) -> np.ndarray:
    src = np.maximum((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0.0)
    i0 = np.floor(src).astype(np.int64)
    i1 = np.minimum(i0 + 1, n_in - 1)
    frac = src - i0
    weights = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    np.add.at(weights, (rows, i0), 1.0 - frac)
    np.add.at(weights, (rows, i1), frac)
    return weights


def _bicubic_weights(n_in: int, n_out: int) -> np.ndarray:
    src = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
    i0 = np.floor(src).astype(np.int64)
    t = src - i0
    cubic = _keys_cubic(-0.75)
    weights = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    for k in range(-1, 3):
        np.add.at(weights, (rows, np.clip(i0 + k, 0, n_in - 1)), cubic(t - k))
    return weights


def _weights(n_in: int, n_out: int, mode: str, antialias: bool) -> np.ndarray:
    if mode == "bilinear":
        return _antialias_weights(n_in, n_out, _triangle, 2) if antialias else _bilinear_weights(n_in, n_out)
    if mode == "bicubic":
        return _antialias_weights(n_in, n_out, _keys_cubic(-0.5), 4) if antialias else _bicubic_weights(n_in, n_out)
    raise ValueError(f"interpolation {mode!r} is not supported for tensor images: use nearest, nearest-exact, "
                     "bilinear or bicubic, or resize the PIL image before converting it")  # fmt: skip


def _nearest_index(n_in: int, n_out: int, exact: bool) -> np.ndarray:
    scale = np.float32(n_in / n_out)  # PyTorch computes the source index in float32
    pos = (np.arange(n_out, dtype=np.float32) + np.float32(0.5 if exact else 0.0)) * scale
    return np.minimum(np.floor(pos).astype(np.int64), n_in - 1)


def resize_array(arr: np.ndarray, height: int, width: int, mode: str, antialias: bool, uint8_passes: bool = False
                 ) -> np.ndarray:  # fmt: skip
    """arr (..., H, W) resized to (..., height, width) with `mode` in nearest/nearest-exact/bilinear/bicubic.

    `uint8_passes` resizes a uint8 image as PyTorch's native uint8 kernels (torchvision v2 on CPU) and Pillow do:
    the width first, rounded and clamped to uint8, then the height; otherwise both at once in float (v1).
    """
    n_h, n_w = arr.shape[-2:]
    if min(n_h, n_w, height, width) <= 0:
        raise ValueError(f"cannot resize an image of size {(n_h, n_w)} to {(height, width)}: sizes must be positive")
    if mode in ("nearest", "nearest-exact"):
        exact = mode == "nearest-exact"
        rows, cols = _nearest_index(n_h, height, exact), _nearest_index(n_w, width, exact)
        return arr[..., rows[:, None], cols[None, :]]
    work = arr.dtype if arr.dtype.kind == "f" else np.dtype(np.float32)
    w_h = _weights(n_h, height, mode, antialias).astype(work)
    w_w = _weights(n_w, width, mode, antialias).astype(work)
    x = arr.astype(work, copy=False)
    if uint8_passes and arr.dtype == np.uint8:
        x = np.clip(np.round(x @ w_w.T), 0, 255)  # (..., H, W) @ (W, w) -> (..., H, w)
        return np.clip(np.round(w_h @ x), 0, 255).astype(np.uint8)  # (h, H) @ (..., H, w) -> (..., h, w)
    out = w_h @ (x @ w_w.T)  # (..., H, W) @ (W, w) -> (..., H, w); (h, H) @ that -> (..., h, w)
    if arr.dtype.kind == "f":
        return out
    if arr.dtype == np.bool_:
        return out >= 0.5
    info = np.iinfo(arr.dtype)
    if mode == "bicubic":
        out = np.clip(out, info.min, info.max)
    return np.round(out).astype(arr.dtype)
