"""CPU backend: convolution on numpy (forward, its input and weight gradients, unfold and fold).

Convolution is im2col: a zero-copy view of every window (`as_strided`) is copied once into a column buffer
and multiplied by the weight in one matmul per chunk of the batch (the chunk bounds the buffer's memory).
1x1 convolutions skip im2col; depthwise ones sum the k*k shifted views. Pooling is cpu_pool.py, padding modes
and interpolation cpu_resample.py; the conventions they share (planes, pairs, pads, half precision): cpu_planes.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from serve.backend import cpu_threads
from serve.backend.cpu_planes import Pads, Pair, pad_planes, upcast_half

__all__ = ["conv2d", "conv2d_input_grad", "conv2d_weight_grad", "fold", "unfold"]

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


def _out_hw(padded: Pair, kernel: Pair, stride: Pair, dilation: Pair) -> Pair:
    """Output (OH, OW) of windows over planes of size `padded`."""
    h, w = ((n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(padded, kernel, stride, dilation))
    return h, w


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


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: Pair, padding: Pads, dilation: Pair,
           groups: int) -> np.ndarray:  # fmt: skip
    """Cross-correlation of x (N, C, H, W) with w (OC, C/groups, kh, kw), plus bias (OC,).

    The lanes (cpu_threads) take a share of the samples each, padding and multiplying them on their own; a single
    sample is split by output rows (or, 1x1, by output channels) instead."""
    dt = x.dtype
    x, w = upcast_half(x), upcast_half(w)
    t, b_, l, r = padding
    out = _out_hw((x.shape[2] + t + b_, x.shape[3] + l + r), w.shape[2:], stride, dilation)
    y = np.empty((x.shape[0], w.shape[0]) + out, x.dtype)
    bias = None if b is None else upcast_half(b).reshape(-1, 1, 1)
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
    xp = pad_planes(x, (t, b + flat, l, r))  # flat taps of the last row run into one spare row
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
    xp = pad_planes(x, padding)
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
    g, w = upcast_half(g), upcast_half(w)
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
    x, g = upcast_half(x), upcast_half(g)
    xp = pad_planes(x, padding)
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
    xp = pad_planes(x, padding)
    out = _out_hw(xp.shape[2:], kernel, stride, dilation)
    cols = np.ascontiguousarray(_windows(xp, kernel, stride, dilation, out))  # (N, C, kh, kw, OH, OW)
    return cols.reshape(x.shape[0], x.shape[1] * kernel[0] * kernel[1], out[0] * out[1])


def fold(cols: np.ndarray, size: Pair, kernel: Pair, stride: Pair, padding: Pads, dilation: Pair) -> np.ndarray:
    """col2im: (N, C*kh*kw, L) -> (N, C, H, W), summing where blocks overlap (the adjoint of unfold)."""
    dt = cols.dtype
    cols = upcast_half(cols)
    n, ckk, _ = cols.shape
    t, b, l, r = padding
    xp = np.zeros((n, ckk // (kernel[0] * kernel[1]), size[0] + t + b, size[1] + l + r), cols.dtype)
    out = _out_hw(xp.shape[2:], kernel, stride, dilation)
    _col2im(xp, cols.reshape(n, xp.shape[1], *kernel, *out), stride, dilation)
    return _crop(xp, padding, size).astype(dt, copy=False)
