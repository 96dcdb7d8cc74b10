"""CPU backend: max, average and adaptive pooling on numpy, and the gathers behind max pooling's indices.

Pooling reduces over the k*k taps of the window, each a strided view of the input (`_pool_taps`): a padded input
is never copied, as padding would only ever be skipped (max) or add zero (average). Max pooling without indices
is separable (a max along H, then along W, over whole flattened planes, the lanes taking a share of the planes);
with indices it goes tap by tap, and an all -inf window points at its first tap inside the input, as PyTorch's.
NaN propagates. Average pooling sums tap by tap in PyTorch's order and divides as PyTorch does (padding counted or
not, `divisor_override`, integer sums truncated). Adaptive windows are PyTorch's; adaptive average pooling is one
matmul per axis (`adaptive_avg_matrix`). Conventions: cpu_planes.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from serve.backend import cpu_threads
from serve.backend.cpu_planes import HALF, Pair, pad_planes, upcast_half

__all__ = [
    "adaptive_avg_matrix",
    "adaptive_max_pool2d",
    "avg_pool2d",
    "avg_pool2d_backward",
    "gather_planes",
    "max_pool2d",
    "scatter_planes",
]


def _tap_range(size: int, out: int, s: int, p: int, offset: int) -> tuple[slice, slice] | None:
    """The outputs q whose tap at `offset` reads inside the input (0 <= q * s - p + offset < size), as an
    output slice and the input slice they read; None when that tap only ever reads padding."""
    q0, q1 = max(0, -((offset - p) // s)), min(out, (size - 1 + p - offset) // s + 1)
    if q1 <= q0:
        return None
    first = q0 * s - p + offset
    return slice(q0, q1), slice(first, first + (q1 - q0 - 1) * s + 1, s)


def _pool_taps(size: Pair, kernel: Pair, stride: Pair, padding: Pair, dilation: Pair,
               out: Pair) -> Iterator[tuple[int, int, tuple[slice, slice], tuple[slice, slice]]]:  # fmt: skip
    """Per kernel tap (i, j): output slices and the input slices they read. Pooling never copies a padded input:
    padding would only ever be skipped (max) or add zero (average)."""
    for i in range(kernel[0]):
        rows = _tap_range(size[0], out[0], stride[0], padding[0], i * dilation[0])
        for j in range(kernel[1]):
            cols = _tap_range(size[1], out[1], stride[1], padding[1], j * dilation[1])
            if rows is not None and cols is not None:
                yield i, j, (rows[0], cols[0]), (rows[1], cols[1])


def _lowest(dt: np.dtype) -> Any:
    return -np.inf if dt.kind == "f" or dt.num in HALF else np.iinfo(dt).min


def _separable_max(x: np.ndarray, kernel: Pair, stride: Pair, padding: Pair, dilation: Pair, out: Pair) -> np.ndarray:
    """The max over rectangular windows as a max along H then along W, each tap one maximum over whole padded
    planes flattened (long contiguous loops: numpy's per-row loop overhead made strided views 3x slower), then
    one strided pick of the window starts. Windows that run past the input read the `lowest` padding, which
    never wins; NaN propagates, as in PyTorch. The lanes take a share of the planes each."""
    n, c, h, w = x.shape
    planes = x.reshape(n * c, 1, h, w)
    y = np.empty((n * c,) + out, x.dtype)

    def part(p0: int, p1: int) -> None:
        y[p0:p1] = _separable_max_planes(planes[p0:p1], kernel, stride, padding, dilation, out)

    cpu_threads.parallel(part, cpu_threads.memory_spans(n * c, x.nbytes))
    return y.reshape(n, c, *out)


def _separable_max_planes(x: np.ndarray, kernel: Pair, stride: Pair, padding: Pair, dilation: Pair,
                          out: Pair) -> np.ndarray:  # fmt: skip
    """_separable_max of the planes x (P, 1, H, W), as a (P, OH, OW) view."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    bottom = max(padding[0], (out[0] - 1) * sh + (kh - 1) * dh + 1 - h - padding[0])
    right = max(padding[1], (out[1] - 1) * sw + (kw - 1) * dw + 1 - w - padding[1])
    xp = pad_planes(x, (padding[0], bottom, padding[1], right), _lowest(x.dtype))
    hp, wp = xp.shape[2:]
    # C order, so that the maxima below are too (ufuncs keep their inputs' order, and the final as_strided
    # assumes rows of wp): a permuted input's planes can reshape to a column-major view
    planes = np.ascontiguousarray(xp.reshape(n * c, hp * wp))
    span = hp * wp - (kh - 1) * dh * wp
    m = planes[:, :span].copy() if kh == 1 else np.maximum(planes[:, :span], planes[:, dh * wp : dh * wp + span])
    for i in range(2, kh):
        np.maximum(m, planes[:, i * dh * wp : i * dh * wp + span], out=m)
    span -= (kw - 1) * dw
    r = m[:, :span] if kw == 1 else np.maximum(m[:, :span], m[:, dw : dw + span])
    for j in range(2, kw):
        np.maximum(r, m[:, j * dw : j * dw + span], out=r)
    e = r.itemsize
    return as_strided(r, (n * c,) + out, (r.strides[0], sh * wp * e, sw * e), writeable=False)


def max_pool2d(x: np.ndarray, kernel: Pair, stride: Pair, padding: Pair, dilation: Pair, out: Pair,
               with_indices: bool) -> tuple[np.ndarray, np.ndarray | None]:  # fmt: skip
    """Max over each window (padding never wins) and, if asked, its flat index h * W + w in the input plane."""
    if not with_indices:
        return _separable_max(x, kernel, stride, padding, dilation, out), None
    h, w = x.shape[2:]
    y = np.full(x.shape[:2] + out, _lowest(x.dtype), x.dtype)
    taps = _pool_taps((h, w), kernel, stride, padding, dilation, out)
    # PyTorch starts from the first tap inside the input, so a window of -inf points there
    start = [np.arange(o) * s - p for o, s, p in zip(out, stride, padding)]
    first = [np.where(st < 0, st % d, st) for st, d in zip(start, dilation)]
    idx = np.empty(y.shape, np.int64)
    idx[...] = first[0][:, None] * w + first[1]
    base = start[0][:, None] * w + start[1]
    for i, j, (ro, co), (ri, ci) in taps:
        v, best = x[:, :, ri, ci], y[:, :, ro, co]
        better = v > best
        if x.dtype.kind == "f":
            better |= np.isnan(v)
        np.copyto(best, v, where=better)
        np.copyto(idx[:, :, ro, co], base[ro, co] + (i * dilation[0] * w + j * dilation[1]), where=better)
    return y, idx


def _avg_divisor(size: Pair, kernel: Pair, stride: Pair, padding: Pair, out: Pair, count_include_pad: bool,
                 divisor_override: int | None, dt: np.dtype) -> Any:  # fmt: skip
    if divisor_override:
        return np.asarray(divisor_override, dt)
    counts = []
    for n, k, s, p, o in zip(size, kernel, stride, padding, out):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)  # a ceil_mode window stops at the padding's edge
        counts.append(end - start if count_include_pad else np.minimum(end, n) - np.maximum(start, 0))
    return (counts[0][:, None] * counts[1]).astype(dt)


def avg_pool2d(x: np.ndarray, kernel: Pair, stride: Pair, padding: Pair, out: Pair, count_include_pad: bool,
               divisor_override: int | None) -> np.ndarray:  # fmt: skip
    """Mean over each window, divided as PyTorch does (padding counted or not, or by `divisor_override`)."""
    dt, size = x.dtype, x.shape[2:]
    integral = dt.kind in "iub"
    x = x.astype(np.int64) if integral else upcast_half(x)
    y = np.zeros(x.shape[:2] + out, x.dtype)
    for _, _, (ro, co), (ri, ci) in _pool_taps(size, kernel, stride, padding, (1, 1), out):
        y[:, :, ro, co] += x[:, :, ri, ci]  # tap by tap, row-major: PyTorch's summation order
    divisor = _avg_divisor(size, kernel, stride, padding, out, count_include_pad, divisor_override, y.dtype)
    if integral:  # PyTorch divides integer sums in integer arithmetic (truncating)
        return np.trunc(y / divisor).astype(dt)
    y /= divisor
    return y.astype(dt, copy=False)


def avg_pool2d_backward(g: np.ndarray, size: Pair, kernel: Pair, stride: Pair, padding: Pair,
                        count_include_pad: bool, divisor_override: int | None) -> np.ndarray:  # fmt: skip
    """The adjoint of avg_pool2d: each output's gradient, divided, spread over its window."""
    dt, out = g.dtype, g.shape[2:]
    g = upcast_half(g)
    g = g / _avg_divisor(size, kernel, stride, padding, out, count_include_pad, divisor_override, g.dtype)
    dx = np.zeros(g.shape[:2] + tuple(size), g.dtype)
    for _, _, (ro, co), (ri, ci) in _pool_taps(size, kernel, stride, padding, (1, 1), out):
        dx[:, :, ri, ci] += g[:, :, ro, co]
    return dx.astype(dt, copy=False)


def _adaptive_index(size: int, out: int) -> np.ndarray:
    """(out, longest window) input positions of PyTorch's adaptive windows, short windows repeating their last."""
    i = np.arange(out)
    start, end = i * size // out, ((i + 1) * size + out - 1) // out
    longest = int((end - start).max()) if out else 1
    return np.minimum(start[:, None] + np.arange(longest), (end - 1)[:, None])


def adaptive_max_pool2d(x: np.ndarray, out: Pair) -> tuple[np.ndarray, np.ndarray]:
    """Max over PyTorch's adaptive windows, with flat per-plane indices."""
    n, c, h, w = x.shape
    ih, iw = _adaptive_index(h, out[0]), _adaptive_index(w, out[1])
    rows, cols = ih[:, None, :, None], iw[None, :, None, :]
    taps = ih.shape[1] * iw.shape[1]
    win = x[:, :, rows, cols].reshape(n, c, *out, taps)  # (N, C, OH, OW, kh*kw)
    arg = np.argmax(win, axis=-1)[..., None]
    flat = (rows * w + cols).reshape(*out, taps)  # (OH, OW, kh*kw)
    return np.take_along_axis(win, arg, -1)[..., 0], np.take_along_axis(flat[None, None], arg, -1)[..., 0]


def adaptive_avg_matrix(size: int, out: int, dt: np.dtype) -> np.ndarray:
    """(out, size): row i averages PyTorch's adaptive window i, so pooling an axis is one matmul."""
    i = np.arange(out)[:, None]
    start, end = i * size // out, ((i + 1) * size + out - 1) // out
    pos = np.arange(size)
    return (((pos >= start) & (pos < end)) / (end - start)).astype(dt)


def gather_planes(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """a (N, C, *plane) read at flat per-plane indices idx (N, C, *out)."""
    n, c = a.shape[:2]
    planes = a.reshape(n, c, int(np.prod(a.shape[2:])))  # explicit sizes: -1 is ambiguous for an empty batch
    return np.take_along_axis(planes, idx.reshape(n, c, int(np.prod(idx.shape[2:]))), 2).reshape(idx.shape)


def scatter_planes(g: np.ndarray, idx: np.ndarray, plane: tuple[int, ...]) -> np.ndarray:
    """The adjoint of gather_planes: zeros (N, C, *plane) with g added at idx (repeats accumulate)."""
    n, c = g.shape[:2]
    size = int(np.prod(plane))
    flat = idx.reshape(n * c, int(np.prod(idx.shape[2:]))) + (np.arange(n * c) * size)[:, None]
    out = np.bincount(flat.ravel(), weights=g.ravel().astype(np.float64), minlength=n * c * size)
    return out.astype(g.dtype).reshape(n, c, *plane)
