"""CUDA backend: convolution, pooling, padding and resampling on CuPy (the names and conventions of `cpu_conv`,
`cpu_pool` and `cpu_resample`).

Convolution is our im2col kernel plus one cuBLAS GEMM per chunk of the batch: the (OC, C*kh*kw) weight against
the (n, C*kh*kw, OH*OW) columns, broadcast over the samples, so the product lands in NCHW order with no
transpose; 1x1 stride-1 unpadded convolutions multiply the (N, C, H*W) view directly; groups (depthwise too)
are one more batch dimension. The bias is added by our fused bias kernel. Float32 convolutions may use TF32
(`serve.backends.cudnn.allow_tf32`, default True as in PyTorch). Pooling runs our kernels; the backward
primitives are CuPy ports of the CPU ones (correct, not tuned). Half-precision inputs stay in half through the
GEMM (float32 accumulation) and compute in float32 in the ports, as the CPU backend does.

Conventions: `kernel`, `stride`, `dilation` and sizes are (h, w) pairs; conv `padding` is (top, bottom, left,
right), pooling `padding` an (h, w) pair.
"""

from __future__ import annotations

import math
from typing import Any

import cupy
import cupyx
import ml_dtypes
import numpy as np

from serve.backend import cpu_conv, cpu_planes, cpu_pool, cpu_resample, flags
from serve.backend import cuda_kernels as K

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
_KERNEL_NUMS = _HALF | {np.dtype(np.float32).num}
# array-module-free helpers (slicing, views and array methods only): the CPU backend's own
_compute, _taps, _col2im, _along = cpu_planes.upcast_half, cpu_conv._taps, cpu_conv._col2im, cpu_resample._along

# the most one im2col buffer may take: a chunk of the batch is at least one sample
_CHUNK_BYTES = 512 << 20


def _dev(a: Any) -> cupy.ndarray:
    from serve.backend.ops_cuda import asarray

    return asarray(a)


def _kernel_ok(a: cupy.ndarray) -> bool:
    return a.dtype.num in _KERNEL_NUMS and a.size > 0


def _gemm(a: cupy.ndarray, b: cupy.ndarray, out: cupy.ndarray | None = None) -> cupy.ndarray:
    from serve.backend.ops_cuda import gemm

    return gemm(a, b, tf32=flags.conv_allow_tf32, out=out)


def _pad(x: cupy.ndarray, padding: Pads, value: Any = 0) -> cupy.ndarray:
    t, b, l, r = padding
    if not (t or b or l or r):
        return x
    n, c, h, w = x.shape
    out = cupy.full((n, c, h + t + b, w + l + r), value, x.dtype)
    out[:, :, t : t + h, l : l + w] = x
    return out


def _crop(xp: cupy.ndarray, padding: Pads, size: Pair) -> cupy.ndarray:
    t, _, l, _ = padding
    if xp.shape[2:] == tuple(size):
        return xp
    return cupy.ascontiguousarray(xp[:, :, t : t + size[0], l : l + size[1]])


def _im2col(x: cupy.ndarray, kernel: Pair, stride: Pair, padding: Pads, dilation: Pair, out: Pair) -> cupy.ndarray:
    """(N, C*kh*kw, OH*OW) columns, rows ordered c*kh*kw + i*kw + j (the weight's OIHW flattening)."""
    n, c = x.shape[:2]
    if _kernel_ok(x):
        # our kernel reads zeros outside the input: only the top/left padding and the output size matter
        return K.im2col(cupy.ascontiguousarray(x), kernel, stride, (padding[0], padding[2]), dilation, out)
    xp = _pad(x, padding)
    taps = [v for _, _, v in _taps(xp, kernel, stride, dilation, out)]
    cols = cupy.stack(taps, axis=2)  # (N, C, kh*kw, OH, OW)
    return cols.reshape(n, c * kernel[0] * kernel[1], out[0] * out[1])


def _chunks(n: int, sample_bytes: int) -> Any:
    step = max(1, min(n, _CHUNK_BYTES // max(sample_bytes, 1)))
    for n0 in range(0, n, step):
        yield n0, min(n, n0 + step)


# ---- convolution -------------------------------------------------------------------------------------
def conv2d(x: cupy.ndarray, w: cupy.ndarray, b: cupy.ndarray | None, stride: Pair, padding: Pads, dilation: Pair,
           groups: int) -> cupy.ndarray:  # fmt: skip
    """Cross-correlation of x (N, C, H, W) with w (OC, C/groups, kh, kw), plus bias (OC,)."""
    if w.dtype != x.dtype:
        w = w.astype(x.dtype)
    if not _kernel_ok(x) and x.dtype != np.float64:  # integer inputs: float32 math, as numpy would promote
        return conv2d(x.astype(np.float32), w.astype(np.float32), b, stride, padding, dilation, groups).astype(x.dtype)
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    t, bo, l, r = padding
    out = cpu_conv._out_hw((h + t + bo, wd + l + r), (kh, kw), stride, dilation)
    k, size = cg * kh * kw, out[0] * out[1]
    wm = w.reshape(groups, oc // groups, k)  # (G, OC/G, C/G*kh*kw)
    y = cupy.empty((n, groups, oc // groups, size), x.dtype)  # NCHW once reshaped
    pointwise = (kh, kw) == (1, 1) and stride == (1, 1) and not any(padding)
    if pointwise:
        _gemm(wm, cupy.ascontiguousarray(x).reshape(n, groups, k, size), out=y)  # (N, G, OC/G, H*W)
    else:
        for n0, n1 in _chunks(n, c * kh * kw * size * x.itemsize):
            cols = _im2col(x[n0:n1], (kh, kw), stride, padding, dilation, out)  # (m, C*kh*kw, L)
            _gemm(wm, cols.reshape(n1 - n0, groups, k, size), out=y[n0:n1])  # (m, G, OC/G, L)
    y = y.reshape(n, oc, size)
    if b is not None:
        if _kernel_ok(y):
            K.bias_activation(y, None, b, "none", size, out=y)
        else:
            y += b.astype(y.dtype, copy=False).reshape(-1, 1)
    return y.reshape(n, oc, *out)


def conv2d_input_grad(g: cupy.ndarray, w: cupy.ndarray, size: Pair, stride: Pair, padding: Pads, dilation: Pair,
                      groups: int) -> cupy.ndarray:  # fmt: skip
    """The gradient of conv2d with respect to its input of spatial `size`; also the transposed convolution."""
    dt = g.dtype
    g, w = _compute(g), _compute(w)
    n, oc = g.shape[:2]
    _, cg, kh, kw = w.shape
    c, out, (t, b, l, r) = cg * groups, g.shape[2:], padding
    xp = cupy.zeros((n, c, size[0] + t + b, size[1] + l + r), g.dtype)
    k, lsize = cg * kh * kw, out[0] * out[1]
    wt = cupy.ascontiguousarray(w.reshape(groups, oc // groups, k).transpose(0, 2, 1))  # (G, C/G*kh*kw, OC/G)
    for n0, n1 in _chunks(n, c * kh * kw * lsize * g.itemsize):
        gm = cupy.ascontiguousarray(g[n0:n1]).reshape(n1 - n0, groups, oc // groups, lsize)
        cols = _gemm(wt, gm)  # (m, G, K, L)
        _col2im(xp[n0:n1], cols.reshape(n1 - n0, c, kh, kw, *out), stride, dilation)
    return _crop(xp, padding, size).astype(dt, copy=False)


def conv2d_weight_grad(x: cupy.ndarray, g: cupy.ndarray, kernel: Pair, stride: Pair, padding: Pads, dilation: Pair,
                       groups: int) -> cupy.ndarray:  # fmt: skip
    """The gradient of conv2d with respect to its weight (OC, C/groups, kh, kw)."""
    dt = x.dtype
    x, g = _compute(x), _compute(g)
    n, c = x.shape[:2]
    oc, out, (kh, kw) = g.shape[1], g.shape[2:], kernel
    k, size = c // groups * kh * kw, out[0] * out[1]
    dw = cupy.zeros((groups, oc // groups, k), g.dtype)
    for n0, n1 in _chunks(n, c * kh * kw * size * x.itemsize):
        m = n1 - n0
        cols = _im2col(x[n0:n1], kernel, stride, padding, dilation, out).reshape(m, groups, k, size)
        gm = cupy.ascontiguousarray(g[n0:n1]).reshape(m, groups, oc // groups, size)
        dw += _gemm(gm, cols.transpose(0, 1, 3, 2)).sum(axis=0)  # (m, G, OC/G, L) @ (m, G, L, K)
    return dw.reshape(oc, c // groups, kh, kw).astype(dt, copy=False)


def unfold(x: cupy.ndarray, kernel: Pair, stride: Pair, padding: Pads, dilation: Pair) -> cupy.ndarray:
    """im2col: (N, C, H, W) -> (N, C*kh*kw, L), the sliding blocks as columns."""
    t, b, l, r = padding
    out = cpu_conv._out_hw((x.shape[2] + t + b, x.shape[3] + l + r), kernel, stride, dilation)
    return _im2col(x, kernel, stride, padding, dilation, out)


def fold(cols: cupy.ndarray, size: Pair, kernel: Pair, stride: Pair, padding: Pads, dilation: Pair) -> cupy.ndarray:
    """col2im: (N, C*kh*kw, L) -> (N, C, H, W), summing where blocks overlap (the adjoint of unfold)."""
    dt = cols.dtype
    cols = _compute(cols)
    n, ckk, _ = cols.shape
    t, b, l, r = padding
    xp = cupy.zeros((n, ckk // (kernel[0] * kernel[1]), size[0] + t + b, size[1] + l + r), cols.dtype)
    out = cpu_conv._out_hw(xp.shape[2:], kernel, stride, dilation)
    _col2im(xp, cols.reshape(n, xp.shape[1], *kernel, *out), stride, dilation)
    return _crop(xp, padding, size).astype(dt, copy=False)


# ---- pooling -----------------------------------------------------------------------------------------
def max_pool2d(x: cupy.ndarray, kernel: Pair, stride: Pair, padding: Pair, dilation: Pair, out: Pair,
               with_indices: bool) -> tuple[cupy.ndarray, cupy.ndarray | None]:  # fmt: skip
    """Max over each window (padding never wins) and, if asked, its flat index h * W + w in the input plane."""
    if _kernel_ok(x):
        return K.max_pool2d(cupy.ascontiguousarray(x), kernel, stride, padding, dilation, out, with_indices)
    h, w = x.shape[2:]
    y = cupy.full(x.shape[:2] + tuple(out), cpu_pool._lowest(x.dtype), x.dtype)
    start = [np.arange(o) * s - p for o, s, p in zip(out, stride, padding)]
    first = [np.where(st < 0, st % d, st) for st, d in zip(start, dilation)]
    idx = cupy.empty(y.shape, np.int64)
    idx[...] = _dev(first[0][:, None] * w + first[1])  # PyTorch starts from the first tap inside the input
    base = start[0][:, None] * w + start[1]
    for i, j, (ro, co), (ri, ci) in cpu_pool._pool_taps((h, w), kernel, stride, padding, dilation, out):
        v, best = x[:, :, ri, ci], y[:, :, ro, co]
        better = v > best
        if x.dtype.kind == "f":
            better |= cupy.isnan(v)
        cupy.copyto(best, v, where=better)
        cupy.copyto(idx[:, :, ro, co], _dev(base[ro, co] + (i * dilation[0] * w + j * dilation[1])), where=better)
    return y, (idx if with_indices else None)


def avg_pool2d(x: cupy.ndarray, kernel: Pair, stride: Pair, padding: Pair, out: Pair, count_include_pad: bool,
               divisor_override: int | None) -> cupy.ndarray:  # fmt: skip
    """Mean over each window, divided as PyTorch does (padding counted or not, or by `divisor_override`)."""
    if _kernel_ok(x):
        return K.avg_pool2d(cupy.ascontiguousarray(x), kernel, stride, padding, out, count_include_pad,
                            divisor_override)  # fmt: skip
    dt, size = x.dtype, x.shape[2:]
    integral = dt.kind in "iub"
    x = x.astype(np.int64) if integral else x
    y = cupy.zeros(x.shape[:2] + tuple(out), x.dtype)
    for _, _, (ro, co), (ri, ci) in cpu_pool._pool_taps(size, kernel, stride, padding, (1, 1), out):
        y[:, :, ro, co] += x[:, :, ri, ci]
    divisor = _dev(cpu_pool._avg_divisor(size, kernel, stride, padding, out, count_include_pad, divisor_override,
                                      np.dtype(y.dtype)))  # fmt: skip
    if integral:  # PyTorch divides integer sums in integer arithmetic (truncating)
        return cupy.trunc(y / divisor).astype(dt)
    y /= divisor
    return y


def avg_pool2d_backward(g: cupy.ndarray, size: Pair, kernel: Pair, stride: Pair, padding: Pair,
                        count_include_pad: bool, divisor_override: int | None) -> cupy.ndarray:  # fmt: skip
    """The adjoint of avg_pool2d: each output's gradient, divided, spread over its window."""
    dt, out = g.dtype, g.shape[2:]
    g = _compute(g)
    divisor = cpu_pool._avg_divisor(size, kernel, stride, padding, out, count_include_pad, divisor_override,
                                 np.dtype(g.dtype))  # fmt: skip
    g = g / _dev(divisor)
    dx = cupy.zeros(g.shape[:2] + tuple(size), g.dtype)
    for _, _, (ro, co), (ri, ci) in cpu_pool._pool_taps(size, kernel, stride, padding, (1, 1), out):
        dx[:, :, ri, ci] += g[:, :, ro, co]
    return dx.astype(dt, copy=False)


def adaptive_max_pool2d(x: cupy.ndarray, out: Pair) -> tuple[cupy.ndarray, cupy.ndarray]:
    """Max over PyTorch's adaptive windows, with flat per-plane indices."""
    n, c, h, w = x.shape
    ih, iw = cpu_pool._adaptive_index(h, out[0]), cpu_pool._adaptive_index(w, out[1])
    rows, cols = ih[:, None, :, None], iw[None, :, None, :]
    taps = ih.shape[1] * iw.shape[1]
    win = x[:, :, _dev(rows), _dev(cols)].reshape(n, c, *out, taps)  # (N, C, OH, OW, kh*kw)
    arg = _first_max(win)[..., None]
    flat = _dev((rows * w + cols).reshape(*out, taps))  # (OH, OW, kh*kw)
    values = cupy.take_along_axis(win, arg, -1)[..., 0]
    return values, cupy.take_along_axis(cupy.broadcast_to(flat[None, None], win.shape), arg, -1)[..., 0]


def _first_max(win: cupy.ndarray) -> cupy.ndarray:
    """numpy's argmax over the last axis: the first maximum, or the first NaN (computed in float32 for half)."""
    x = _compute(win)
    if x.dtype.kind == "f":
        nan = cupy.isnan(x)
        return cupy.where(nan.any(-1), cupy.argmax(nan, axis=-1), cupy.argmax(x, axis=-1))
    return cupy.argmax(x, axis=-1)


def adaptive_avg_matrix(size: int, out: int, dt: np.dtype) -> cupy.ndarray:
    """(out, size): row i averages PyTorch's adaptive window i, so pooling an axis is one matmul."""
    return _dev(cpu_pool.adaptive_avg_matrix(size, out, dt))


def gather_planes(a: cupy.ndarray, idx: cupy.ndarray) -> cupy.ndarray:
    """a (N, C, *plane) read at flat per-plane indices idx (N, C, *out)."""
    n, c = a.shape[:2]
    planes = a.reshape(n, c, math.prod(a.shape[2:]))
    flat = idx.reshape(n, c, math.prod(idx.shape[2:]))
    return cupy.take_along_axis(planes, flat, 2).reshape(idx.shape)


def scatter_planes(g: cupy.ndarray, idx: cupy.ndarray, plane: tuple[int, ...]) -> cupy.ndarray:
    """The adjoint of gather_planes: zeros (N, C, *plane) with g added at idx (repeats accumulate)."""
    n, c = g.shape[:2]
    size = math.prod(plane)
    flat = idx.reshape(n * c, math.prod(idx.shape[2:])) + (cupy.arange(n * c) * size)[:, None]
    out = cupy.bincount(flat.ravel(), weights=g.ravel().astype(np.float64), minlength=n * c * size)
    return out.astype(g.dtype).reshape(n, c, *plane)


# ---- resampling along axes: the plans are ops_cpu's, with their index and weight arrays on the device ----
def _on_device(plan: tuple) -> tuple:
    return tuple(_dev(p) for p in plan)


def pad_plan(mode: str, size: int, before: int, after: int) -> tuple:
    return _on_device(cpu_resample.pad_plan(mode, size, before, after))


def nearest_plan(size: int, out: int, scale: float | None, exact: bool) -> tuple:
    return _on_device(cpu_resample.nearest_plan(size, out, scale, exact))


def linear_plan(size: int, out: int, align_corners: bool, scale: float | None, dt: np.dtype) -> tuple:
    return _on_device(cpu_resample.linear_plan(size, out, align_corners, scale, dt))


def resample(a: cupy.ndarray, plan: tuple) -> cupy.ndarray:
    """Apply `plan` (one step per trailing axis, see cpu_resample) to a."""
    dt = a.dtype
    out = a if all(len(p) == 1 for p in plan) else _compute(a)
    for axis, step in zip(range(-len(plan), 0), plan):
        if len(step) == 1:
            out = cupy.take(out, step[0], axis)
        else:
            i0, i1, l0, l1 = step
            out = cupy.take(out, i0, axis) * _along(l0, axis) + cupy.take(out, i1, axis) * _along(l1, axis)
    return out.astype(dt, copy=False)


def _scatter_axis(g: cupy.ndarray, idx: cupy.ndarray, size: int, axis: int) -> cupy.ndarray:
    """Zeros with `size` along `axis`, plus g[..., j, ...] added at idx[j] (repeats accumulate)."""
    shape = list(g.shape)
    shape[axis] = size
    out = cupy.zeros(shape, g.dtype)
    if idx.size:
        moved = cupy.ascontiguousarray(cupy.moveaxis(out, axis, 0))
        cupyx.scatter_add(moved, idx, cupy.moveaxis(g, axis, 0))
        out = cupy.moveaxis(moved, 0, axis)
    return out


def resample_adjoint(g: cupy.ndarray, sizes: tuple[int, ...], plan: tuple) -> cupy.ndarray:
    """The gradient of resample: the trailing axes go back to `sizes`, repeats accumulating."""
    dt = g.dtype
    out = _compute(g)
    for axis, step, size in reversed(list(zip(range(-len(plan), 0), plan, sizes))):
        if len(step) == 1:
            out = _scatter_axis(out, step[0], size, axis)
        else:
            i0, i1, l0, l1 = step
            both = cupy.concatenate([out * _along(l0, axis), out * _along(l1, axis)], axis)
            out = _scatter_axis(both, cupy.concatenate([i0, i1]), size, axis)
    return cupy.ascontiguousarray(out).astype(dt, copy=False)
