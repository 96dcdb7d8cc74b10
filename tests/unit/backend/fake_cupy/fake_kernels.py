"""numpy versions of the `cuda_kernels` wrappers (the KERNELS -> OPS contract), for check_ops_cuda.py.

Each checks what the contract says the wrapper requires (dtype, shapes, C-contiguous `out=`) and records its
name in `calls`, so the check can tell which paths of ops_cuda reached a kernel.
"""

import cupy
import ml_dtypes
import numpy as np

from serve.backend import cpu_nn, cpu_pool, ops_cpu

OK = {np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}
calls = []


def _chk(x, what):
    calls.append(what)
    if x.dtype not in OK:
        raise ValueError(f"{what}: unsupported dtype {x.dtype}")
    return np.ascontiguousarray(np.asarray(x))


def _act(v, act):
    if act == "none":
        return v
    if act == "relu":
        return np.maximum(v, 0)
    if act == "gelu":
        return cpu_nn.gelu(v, "none")
    if act == "gelu_tanh":
        return cpu_nn.gelu(v, "tanh")
    if act == "silu":
        return cpu_nn.silu(v)
    raise ValueError(act)


def bias_activation(y, scale, shift, act, inner, out=None):
    y = _chk(y, "bias_activation")
    c = next((p.size for p in (shift, scale) if p is not None), 1)
    assert y.size % (c * inner) == 0, (y.shape, c, inner)
    v = y.astype(np.float32).reshape(-1, c, inner)
    if scale is not None:
        v = v * np.asarray(scale).astype(np.float32).reshape(1, c, 1)
    if shift is not None:
        v = v + np.asarray(shift).astype(np.float32).reshape(1, c, 1)
    r = _act(v, act).astype(y.dtype).reshape(y.shape)
    if out is not None:
        assert out.flags.c_contiguous and out.shape == y.shape
        out[...] = r
        return out
    return r.view(cupy.ndarray)


def activation(x, act):
    return bias_activation(x, None, None, act, 1)


def softmax(x, log=False):
    x = _chk(x, "softmax")
    f = ops_cpu.log_softmax if log else ops_cpu.softmax
    return f(x.astype(np.float32), -1).astype(x.dtype).view(cupy.ndarray)


def scaled_masked_softmax(scores, scale, mask=None, causal=False, safe=False):
    s = _chk(scores, "scaled_masked_softmax").astype(np.float32) * np.float32(scale)
    assert s.ndim == 4
    if mask is not None:
        m = np.asarray(mask)
        assert m.ndim <= 4
        m = np.broadcast_to(m.reshape((1,) * (4 - m.ndim) + m.shape), s.shape)
        is_bool = m.dtype == np.bool_
        m = m if is_bool else m.astype(np.float32)
    else:
        m, is_bool = None, False
    assert not causal
    return ops_cpu.masked_softmax(s, m, is_bool, safe).astype(scores.dtype).view(cupy.ndarray)


def layer_norm(x, weight, bias, n, eps):
    x = _chk(x, "layer_norm")
    r = x.astype(np.float32).reshape(-1, n)
    mean = r.mean(1, keepdims=True)
    var = ((r - mean) ** 2).mean(1, keepdims=True)
    y = (r - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * np.asarray(weight).astype(np.float32).reshape(-1)
    if bias is not None:
        y = y + np.asarray(bias).astype(np.float32).reshape(-1)
    return y.astype(x.dtype).reshape(x.shape).view(cupy.ndarray)


def standardize_rows(x, n, eps):
    return layer_norm(x, None, None, n, eps)


def row_moments(x, n):
    x = _chk(x, "row_moments")
    r = x.astype(np.float32).reshape(-1, n)
    mean = r.mean(1)
    return mean.view(cupy.ndarray), ((r - mean[:, None]) ** 2).mean(1).view(cupy.ndarray)


def embedding(weight, ids):
    w = _chk(weight, "embedding")
    ids = np.asarray(ids)
    assert ids.dtype in (np.int32, np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= w.shape[0]):
        raise IndexError("embedding: index out of range")
    return w[ids].view(cupy.ndarray)


def _top_left(p):
    return (p[0], p[1]) if len(p) == 2 else (p[0], p[2])


def max_pool2d(x, kernel, stride, padding, dilation, out_hw, with_indices):
    x = _chk(x, "max_pool2d")
    assert x.ndim == 4
    y, idx = cpu_pool.max_pool2d(x, kernel, stride, _top_left(padding), dilation, tuple(out_hw), True)
    return np.ascontiguousarray(y).view(cupy.ndarray), (idx.view(cupy.ndarray) if with_indices else None)


def avg_pool2d(x, kernel, stride, padding, out_hw, count_include_pad, divisor_override):
    x = _chk(x, "avg_pool2d")
    return cpu_pool.avg_pool2d(
        x, kernel, stride, _top_left(padding), tuple(out_hw), count_include_pad, divisor_override
    ).view(cupy.ndarray)


def im2col(x, kernel, stride, padding, dilation, out_hw):
    x = _chk(x, "im2col")
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_hw
    t, l = _top_left(padding)
    big = np.zeros((n, c, h + t + oh * sh + kh * dh, w + l + ow * sw + kw * dw), x.dtype)
    big[:, :, t : t + h, l : l + w] = x
    cols = np.empty((n, c, kh, kw, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = big[:, :, i * dh : i * dh + sh * oh : sh, j * dw : j * dw + sw * ow : sw]
    return cols.reshape(n, c * kh * kw, oh * ow).view(cupy.ndarray)
