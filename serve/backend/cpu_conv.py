"""CPU backend: convolution, pooling, padding and resampling on numpy.

Convolution is im2col: a zero-copy view of every window (`as_strided`) is copied once into a column buffer
and multiplied by the weight in one matmul per chunk of the batch (the chunk bounds the buffer's memory).
1x1 convolutions skip im2col; depthwise ones sum the k*k shifted views. Pooling reduces over the k*k
strided views. Everything works on planes (N, C, H, W); the 1-d forms reach it with H = 1. Half-precision
inputs compute in float32, as PyTorch does on CPU.

Conventions: `kernel`, `stride`, `dilation` and sizes are (h, w) pairs; `padding` is (top, bottom, left, right).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import as_strided

from serve.backend import cpu_threads

__all__ = [
    "adaptive_avg_matrix",
    "adaptive_max_pool2d",
    "avg_pool2d",
    "avg_pool2d_backward",
    "conv2d",
    "conv2d_input_grad",
    "conv2d_weight_grad",
    "fold",
    "gather_planes",
    "linear_plan",
    "max_pool2d",
    "nearest_plan",
    "pad_plan",
    "resample",
    "resample_adjoint",
    "scatter_planes",
    "unfold",
]

Pair = tuple[int, int]
Pads = tuple[int, int, int, int]
_HALF = frozenset((np.dtype(np.float16).num, np.dtype(ml_dtypes.bfloat16).num))
# the most one im2col buffer may take (a chunk is at least one sample): conv1 of ResNet-18 at batch 8 would
# otherwise build a ~470 MB matrix. Measured on ResNet-18: a buffer that stays in the last-level cache while
# the matmul reads it beats bigger chunks, and malloc reuses it instead of page-faulting a fresh one
_CHUNK_BYTES = 8 << 20
# a sample whose im2col columns pass this size is done in blocks of output rows that stay in the per-core L2
_ROWS_BYTES = 2 << 20
# depthwise accumulates tap by tap: a chunk of the output that stays in L2 between taps is ~3x faster
_DEPTHWISE_BYTES = 1 << 20
# below this many output pixels per sample, one matmul over the whole chunk beats one per sample
_SMALL_PLANE = 1024


def _compute(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32) if a.dtype.num in _HALF else a


def _out_hw(padded: Pair, kernel: Pair, stride: Pair, dilation: Pair) -> Pair:
    """Output (OH, OW) of windows over planes of size `padded`."""
    h, w = ((n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(padded, kernel, stride, dilation))
    return h, w


def _pad(x: np.ndarray, padding: Pads, value: Any = 0) -> np.ndarray:
    t, b, l, r = padding
    if not (t or b or l or r):
        return x
    n, c, h, w = x.shape
    out = np.full((n, c, h + t + b, w + l + r), value, x.dtype)
    out[:, :, t : t + h, l : l + w] = x
    return out


def _crop(xp: np.ndarray, padding: Pads, size: Pair) -> np.ndarray:
    t, _, l, _ = padding
    if xp.shape[2:] == size:
        return xp
    return np.ascontiguousarray(xp[:, :, t : t + size[0], l : l + size[1]])


def _windows(xp: np.ndarray, kernel: Pair, stride: Pair, dilation: Pair, out: Pair) -> np.ndarray:
    """The (N, C, kh, kw, OH, OW) view of every window of the padded input (no copy)."""
    sn, sc, sh, sw = xp.strides
    strides = (sn, sc, sh * dilation[0], sw * dilation[1], sh * stride[0], sw * stride[1])
    return as_strided(xp, xp.shape[:2] + tuple(kernel) + tuple(out), strides, writeable=False)


def _taps(xp: np.ndarray, kernel: Pair, stride: Pair, dilation: Pair, out: Pair) -> Iterator[tuple[int, int, Any]]:
    """(i, j, view) per kernel tap: the writeable (N, C, OH, OW) view of `xp` that tap reads."""
    (sh, sw), (oh, ow) = stride, out
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            h0, w0 = i * dilation[0], j * dilation[1]
            yield i, j, xp[:, :, h0 : h0 + sh * (oh - 1) + 1 : sh, w0 : w0 + sw * (ow - 1) + 1 : sw]


def _chunks(n: int, sample_bytes: int, budget: int | None = None) -> Iterator[tuple[int, int]]:
    step = max(1, min(n, (budget or _CHUNK_BYTES) // max(sample_bytes, 1)))
    for n0 in range(0, n, step):
        yield n0, min(n, n0 + step)


def _is_depthwise(channels: int, groups: int) -> bool:
    return groups > 1 and groups == channels


# ---- convolution -------------------------------------------------------------------------------------
def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: Pair, padding: Pads, dilation: Pair,
           groups: int) -> np.ndarray:  # fmt: skip
    """Cross-correlation of x (N, C, H, W) with w (OC, C/groups, kh, kw), plus bias (OC,).

    The lanes (cpu_threads) take a share of the samples each, padding and multiplying them on their own; a single
    sample is split by output rows (or, 1x1, by output channels) instead."""
    dt = x.dtype
    x, w = _compute(x), _compute(w)
    t, b_, l, r = padding
    out = _out_hw((x.shape[2] + t + b_, x.shape[3] + l + r), w.shape[2:], stride, dilation)
    y = np.empty((x.shape[0], w.shape[0]) + out, x.dtype)
    bias = None if b is None else _compute(b).reshape(-1, 1, 1)
    if not cpu_threads.blas_controlled():  # the BLAS runs its own threads: no lanes around its products
        _conv_samples(x, w, bias, stride, padding, dilation, groups, y)
    elif x.shape[0] == 1:
        _conv_one_sample(x, w, bias, stride, padding, dilation, groups, y)
    else:
        cpu_threads.parallel(lambda n0, n1: _conv_samples(x[n0:n1], w, bias, stride, padding, dilation, groups,
                                                          y[n0:n1]), cpu_threads.spans(x.shape[0]))  # fmt: skip
    return y.astype(dt, copy=False)


def _conv_samples(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride: Pair, padding: Pads,
                  dilation: Pair, groups: int, y: np.ndarray) -> None:  # fmt: skip
    """conv2d of the samples x into y, on the calling thread."""
    kernel = w.shape[2:]
    flat = _is_depthwise(x.shape[1], groups) and stride == (1, 1)
    t, b, l, r = padding
    xp = _pad(x, (t, b + flat, l, r))  # flat taps of the last row run into one spare row
    if flat:
        _depthwise_flat(xp, w, dilation, y)
    elif kernel == (1, 1):
        _pointwise(_strided(xp, stride, y.shape[2:]), w, groups, y)
    else:  # strided depthwise too: one (multiplier, kh*kw) @ (kh*kw, L) product per channel
        _im2col_conv(xp, w, stride, dilation, groups, y)
    if bias is not None:
        y += bias


def _conv_one_sample(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride: Pair, padding: Pads,
                     dilation: Pair, groups: int, y: np.ndarray) -> None:  # fmt: skip
    """conv2d of one sample with the lanes splitting its output rows (1x1: its output channels)."""
    oc, kernel, (oh, ow) = w.shape[0], w.shape[2:], y.shape[2:]
    if _is_depthwise(x.shape[1], groups) or (kernel == (1, 1) and groups > 1):
        _conv_samples(x, w, bias, stride, padding, dilation, groups, y)
        return
    xp = _pad(x, padding)
    if kernel == (1, 1):
        cols = np.ascontiguousarray(_strided(xp, stride, (oh, ow))).reshape(-1, oh * ow)
        w2, ym = w.reshape(oc, -1), y.reshape(oc, oh * ow)

        def channels(o0: int, o1: int) -> None:
            np.matmul(w2[o0:o1], cols, out=ym[o0:o1])
            if bias is not None:
                ym[o0:o1] += bias[o0:o1, 0]

        cpu_threads.parallel(channels, cpu_threads.spans(oc))
        return
    win = _windows(xp, kernel, stride, dilation, (oh, ow))
    wm = w.reshape(groups, oc // groups, -1)
    rows = max(1, _ROWS_BYTES // _row_bytes(xp, kernel, ow))

    def row_span(r0: int, r1: int) -> None:
        _row_blocks(win, wm, y, rows, r0, r1)
        if bias is not None:
            y[:, :, r0:r1] += bias

    cpu_threads.parallel(row_span, cpu_threads.spans(oh))


def _strided(xp: np.ndarray, stride: Pair, out: Pair) -> np.ndarray:
    """The pixels a 1x1 convolution with `stride` reads (a view)."""
    return xp[:, :, : stride[0] * out[0] : stride[0], : stride[1] * out[1] : stride[1]]


def _pointwise(x: np.ndarray, w: np.ndarray, groups: int, y: np.ndarray) -> None:
    n, c, h, wd = x.shape
    oc = w.shape[0]
    wm = w.reshape(groups, oc // groups, c // groups)
    np.matmul(wm, x.reshape(n, groups, c // groups, h * wd), out=y.reshape(n, groups, oc // groups, h * wd))


def _im2col_conv(xp: np.ndarray, w: np.ndarray, stride: Pair, dilation: Pair, groups: int, y: np.ndarray) -> None:
    n = xp.shape[0]
    oc, cg, kh, kw = w.shape
    out = y.shape[2:]
    k, l = cg * kh * kw, out[0] * out[1]
    win = _windows(xp, (kh, kw), stride, dilation, out)
    wm = w.reshape(groups, oc // groups, k)
    row_bytes = _row_bytes(xp, (kh, kw), out[1])
    if row_bytes * out[0] > _ROWS_BYTES:
        _row_blocks(win, wm, y, max(1, _ROWS_BYTES // row_bytes), 0, out[0])
        return
    for n0, n1 in _chunks(n, row_bytes * out[0]):
        m = n1 - n0
        if groups == 1 and l < _SMALL_PLANE and m > 1:
            cols = np.ascontiguousarray(win[n0:n1].transpose(1, 2, 3, 0, 4, 5)).reshape(k, m * l)  # (C*kh*kw, m*L)
            y[n0:n1] = (wm[0] @ cols).reshape(oc, m, *out).transpose(1, 0, 2, 3)  # (OC, m, OH, OW) -> NCHW
        else:
            stacked = np.ascontiguousarray(win[n0:n1]).reshape(m, groups, k, l)  # (m, G, C/G*kh*kw, L)
            np.matmul(wm, stacked, out=y[n0:n1].reshape(m, groups, oc // groups, l))  # (m, G, OC/G, L)


def _row_bytes(xp: np.ndarray, kernel: Pair, ow: int) -> int:
    """The size of the im2col columns of one output row of one sample."""
    return xp.shape[1] * kernel[0] * kernel[1] * ow * xp.itemsize


def _row_blocks(win: np.ndarray, wm: np.ndarray, y: np.ndarray, rows: int, first: int, stop: int) -> None:
    """im2col over blocks of `rows` output rows (from `first` to `stop`) of one sample at a time, for planes whose
    columns would overflow the CPU's cache: the product then reads a block the copy has just written (ResNet's
    56x56 layers ~20% faster)."""
    groups, ocg, k = wm.shape
    ow = y.shape[3]
    for i in range(y.shape[0]):
        for r0 in range(first, stop, rows):
            r1 = min(stop, r0 + rows)
            cols = np.ascontiguousarray(win[i, :, :, :, r0:r1]).reshape(groups, k, (r1 - r0) * ow)  # (G, K, rows*OW)
            np.matmul(wm, cols, out=y[i, :, r0:r1].reshape(groups, ocg, (r1 - r0) * ow))  # a view: rows*OW contiguous


def _depthwise_flat(xp: np.ndarray, w: np.ndarray, dilation: Pair, out_y: np.ndarray) -> None:
    """Stride-1 depthwise into out_y: each tap reads one contiguous slice of the flattened padded planes, so every
    multiply-add runs over whole rows (the columns past OW are cropped at the end)."""
    n, c, hp, wp = xp.shape
    oc, _, kh, kw = w.shape
    out = out_y.shape[2:]
    planes, l = xp.reshape(n, c, 1, hp * wp), out[0] * wp
    wk = w.reshape(c, oc // c, kh * kw, 1)
    y = np.empty((n, c, oc // c, l), xp.dtype)
    for n0, n1 in _chunks(n, y.nbytes // max(n, 1), _DEPTHWISE_BYTES):
        acc = y[n0:n1]
        tmp = np.empty_like(acc)
        for tap in range(kh * kw):
            i, j = divmod(tap, kw)
            off = i * dilation[0] * wp + j * dilation[1]
            src = planes[n0:n1, :, :, off : off + l]
            if tap:
                acc += np.multiply(src, wk[:, :, tap], out=tmp)
            else:
                np.multiply(src, wk[:, :, tap], out=acc)
    np.copyto(out_y, y.reshape(n, oc, out[0], wp)[..., : out[1]])


def _col2im(xp: np.ndarray, cols: np.ndarray, stride: Pair, dilation: Pair) -> None:
    """Add the (N, C, kh, kw, OH, OW) columns back onto the padded planes `xp`, in place."""
    for i, j, v in _taps(xp, cols.shape[2:4], stride, dilation, cols.shape[4:]):
        v += cols[:, :, i, j]


def conv2d_input_grad(g: np.ndarray, w: np.ndarray, size: Pair, stride: Pair, padding: Pads, dilation: Pair,
                      groups: int) -> np.ndarray:  # fmt: skip
    """The gradient of conv2d with respect to its input of spatial `size`; also the transposed convolution."""
    dt = g.dtype
    g, w = _compute(g), _compute(w)
    n, oc = g.shape[:2]
    _, cg, kh, kw = w.shape
    c, out, (t, b, l, r) = cg * groups, g.shape[2:], padding
    xp = np.zeros((n, c, size[0] + t + b, size[1] + l + r), g.dtype)
    if _is_depthwise(c, groups):
        gk, wk = g.reshape(n, c, oc // c, *out), w.reshape(c, oc // c, kh, kw)
        for i, j, v in _taps(xp, (kh, kw), stride, dilation, out):
            v += np.einsum("ncmhw,cm->nchw", gk, wk[:, :, i, j])
    else:
        k, lsize = cg * kh * kw, out[0] * out[1]
        wt = w.reshape(groups, oc // groups, k).transpose(0, 2, 1)  # (G, C/G*kh*kw, OC/G)
        for n0, n1 in _chunks(n, c * kh * kw * lsize * g.itemsize):
            cols = np.matmul(wt, g[n0:n1].reshape(n1 - n0, groups, oc // groups, lsize))  # (m, G, K, L)
            _col2im(xp[n0:n1], cols.reshape(n1 - n0, c, kh, kw, *out), stride, dilation)
    return _crop(xp, padding, size).astype(dt, copy=False)


def conv2d_weight_grad(x: np.ndarray, g: np.ndarray, kernel: Pair, stride: Pair, padding: Pads, dilation: Pair,
                       groups: int) -> np.ndarray:  # fmt: skip
    """The gradient of conv2d with respect to its weight (OC, C/groups, kh, kw)."""
    dt = x.dtype
    x, g = _compute(x), _compute(g)
    xp = _pad(x, padding)
    n, c = x.shape[:2]
    oc, out, (kh, kw) = g.shape[1], g.shape[2:], kernel
    if _is_depthwise(c, groups):
        gk = g.reshape(n, c, oc // c, *out)
        dw = np.empty((c, oc // c, kh, kw), g.dtype)
        for i, j, v in _taps(xp, kernel, stride, dilation, out):
            dw[:, :, i, j] = np.einsum("nchw,ncmhw->cm", v, gk)
        return dw.reshape(oc, 1, kh, kw).astype(dt, copy=False)
    k, l = c // groups * kh * kw, out[0] * out[1]
    win = _windows(xp, kernel, stride, dilation, out)
    dw = np.zeros((groups, oc // groups, k), g.dtype)
    for n0, n1 in _chunks(n, c * kh * kw * l * xp.itemsize):
        m = n1 - n0
        cols = np.ascontiguousarray(win[n0:n1].transpose(1, 2, 3, 0, 4, 5)).reshape(groups, k, m * l)
        gm = np.ascontiguousarray(g[n0:n1].transpose(1, 0, 2, 3)).reshape(groups, oc // groups, m * l)
        dw += np.matmul(gm, cols.transpose(0, 2, 1))  # (G, OC/G, m*L) @ (G, m*L, K)
    return dw.reshape(oc, c // groups, kh, kw).astype(dt, copy=False)


def unfold(x: np.ndarray, kernel: Pair, stride: Pair, padding: Pads, dilation: Pair) -> np.ndarray:
    """im2col: (N, C, H, W) -> (N, C*kh*kw, L), the sliding blocks as columns."""
    xp = _pad(x, padding)
    out = _out_hw(xp.shape[2:], kernel, stride, dilation)
    cols = np.ascontiguousarray(_windows(xp, kernel, stride, dilation, out))  # (N, C, kh, kw, OH, OW)
    return cols.reshape(x.shape[0], x.shape[1] * kernel[0] * kernel[1], out[0] * out[1])


def fold(cols: np.ndarray, size: Pair, kernel: Pair, stride: Pair, padding: Pads, dilation: Pair) -> np.ndarray:
    """col2im: (N, C*kh*kw, L) -> (N, C, H, W), summing where blocks overlap (the adjoint of unfold)."""
    dt = cols.dtype
    cols = _compute(cols)
    n, ckk, _ = cols.shape
    t, b, l, r = padding
    xp = np.zeros((n, ckk // (kernel[0] * kernel[1]), size[0] + t + b, size[1] + l + r), cols.dtype)
    out = _out_hw(xp.shape[2:], kernel, stride, dilation)
    _col2im(xp, cols.reshape(n, xp.shape[1], *kernel, *out), stride, dilation)
    return _crop(xp, padding, size).astype(dt, copy=False)


# ---- pooling -----------------------------------------------------------------------------------------
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
    return -np.inf if dt.kind == "f" or dt.num in _HALF else np.iinfo(dt).min


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
    xp = _pad(x, (padding[0], bottom, padding[1], right), _lowest(x.dtype))
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
    x = x.astype(np.int64) if integral else _compute(x)
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
    g = _compute(g)
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


# ---- resampling along axes: non-constant padding and interpolation -------------------------------------
# A plan holds one step per trailing axis: (idx,) reads x[idx] along it; (i0, i1, l0, l1) reads
# x[i0] * l0 + x[i1] * l1. Both are linear, so the adjoint below is their gradient.
def pad_plan(mode: str, size: int, before: int, after: int) -> tuple[np.ndarray]:
    """Source positions of reflect / replicate / circular padding (negative pads crop)."""
    i = np.arange(-before, size + after)
    if mode == "reflect":
        i = np.abs(i)
        i = np.where(i >= size, 2 * (size - 1) - i, i)
    elif mode == "replicate":
        i = np.clip(i, 0, size - 1)
    else:  # circular wraps within what is left after cropping, as PyTorch does
        lo, hi = max(-before, 0), size - max(-after, 0)
        i = lo + (np.arange(-max(before, 0), hi - lo + max(after, 0)) % (hi - lo))
    return (i,)


def nearest_plan(size: int, out: int, scale: float | None, exact: bool) -> tuple[np.ndarray]:
    """Source positions of nearest / nearest-exact, in PyTorch's float32 arithmetic."""
    if not exact and out == size:
        return (np.arange(out),)
    if not exact and out == 2 * size:
        return (np.arange(out) // 2,)
    step = np.float32(1.0 / scale if scale else size / out)
    pos = np.arange(out, dtype=np.float32) + (np.float32(0.5) if exact else np.float32(0))
    return (np.minimum(np.floor(pos * step).astype(np.int64), size - 1),)


def linear_plan(size: int, out: int, align_corners: bool, scale: float | None, dt: np.dtype) -> tuple:
    """Two source positions and weights per output, as PyTorch's linear interpolation computes them."""
    ct: Any = np.float64 if dt == np.float64 else np.float32
    if align_corners:
        step = ct((size - 1) / (out - 1)) if out > 1 else ct(0)
        src = step * np.arange(out, dtype=ct)
    else:
        step = ct(1.0 / scale if scale else size / out)
        src = np.maximum(step * (np.arange(out, dtype=ct) + ct(0.5)) - ct(0.5), ct(0))
    i0 = np.minimum(src.astype(np.int64), size - 1)
    l1 = np.clip(src - i0, 0, 1).astype(ct)
    return i0, np.minimum(i0 + 1, size - 1), (1 - l1).astype(ct), l1


def _along(v: np.ndarray, axis: int) -> np.ndarray:
    """Per-position weights shaped to broadcast along the (negative) `axis`."""
    return v.reshape((-1,) + (1,) * (-axis - 1))


def resample(a: np.ndarray, plan: tuple) -> np.ndarray:
    """Apply `plan` (one step per trailing axis, see above) to a."""
    dt = a.dtype
    out = a if all(len(p) == 1 for p in plan) else _compute(a)
    for axis, step in zip(range(-len(plan), 0), plan):
        if len(step) == 1:
            out = np.take(out, step[0], axis)
        else:
            i0, i1, l0, l1 = step
            out = np.take(out, i0, axis) * _along(l0, axis) + np.take(out, i1, axis) * _along(l1, axis)
    return out.astype(dt, copy=False)


def _scatter_axis(g: np.ndarray, idx: np.ndarray, size: int, axis: int) -> np.ndarray:
    """Zeros with `size` along `axis`, plus g[..., j, ...] added at idx[j] (sorted, then one reduceat)."""
    shape = list(g.shape)
    shape[axis] = size
    out = np.zeros(shape, g.dtype)
    if not idx.size:
        return out
    order = np.argsort(idx, kind="stable")
    sorted_idx = idx[order]
    starts = np.flatnonzero(np.r_[True, sorted_idx[1:] != sorted_idx[:-1]])
    sums = np.add.reduceat(np.take(g, order, axis), starts, axis)
    np.moveaxis(out, axis, 0)[sorted_idx[starts]] = np.moveaxis(sums, axis, 0)
    return out


def resample_adjoint(g: np.ndarray, sizes: tuple[int, ...], plan: tuple) -> np.ndarray:
    """The gradient of resample: the trailing axes go back to `sizes`, repeats accumulating."""
    dt = g.dtype
    out = _compute(g)
    for axis, step, size in reversed(list(zip(range(-len(plan), 0), plan, sizes))):
        if len(step) == 1:
            out = _scatter_axis(out, step[0], size, axis)
        else:
            i0, i1, l0, l1 = step
            both = np.concatenate([out * _along(l0, axis), out * _along(l1, axis)], axis)
            out = _scatter_axis(both, np.concatenate([i0, i1]), size, axis)
    return out.astype(dt, copy=False)
