"""CPU backend: the fused array kernels behind `serve.nn.functional` (linear, activations, normalization).

Each is one numpy pass (or as few as numpy allows) so the no-grad path of a layer costs one call. Half-precision
inputs are computed in float32 and rounded once at the end, as PyTorch's CPU kernels do.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from serve.backend import cpu_blas, cpu_threads

__all__ = [
    "bag_counts", "bag_ids", "bag_positions", "batch_norm_eval", "binary_", "dropout_mask", "elu", "erfinv", "gelu",
    "hardsigmoid", "hardswish", "hardtanh", "layer_norm", "leaky_relu", "linear", "log_sigmoid", "mish", "moments",
    "orthogonal", "relu_", "silu", "softplus", "standardize", "threshold",
]  # fmt: skip

_HALF_NUMS = frozenset((np.dtype(np.float16).num, np.dtype(ml_dtypes.bfloat16).num))
_SQRT_HALF = 1 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_BLOCK = 1 << 16  # elements per block of a multi-pass kernel: its temporaries stay in the CPU cache


def _in_float32(kernel: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """Run `kernel` on float32 copies of half-precision arrays and round its result back once."""

    def wrapper(a: np.ndarray, *args: Any) -> np.ndarray:
        if a.dtype.num in _HALF_NUMS:
            args = tuple(x.astype(np.float32) if isinstance(x, np.ndarray) else x for x in args)
            return kernel(a.astype(np.float32), *args).astype(a.dtype)
        return kernel(a, *args)

    wrapper.__name__ = kernel.__name__
    wrapper.__doc__ = kernel.__doc__
    return wrapper


def _blockwise(kernel: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """Run an elementwise kernel over big arrays one cache-sized block at a time (blocks, never elements), the
    lanes taking a share of the blocks each."""

    def wrapper(a: np.ndarray, *args: Any) -> np.ndarray:
        if a.size <= _BLOCK:
            return kernel(a, *args)
        flat = a.reshape(-1)
        out = np.empty_like(flat)

        def blocks(start: int, stop: int) -> None:
            for i in range(start, stop, _BLOCK):
                out[i : min(stop, i + _BLOCK)] = kernel(flat[i : min(stop, i + _BLOCK)], *args)

        cpu_threads.parallel(blocks, cpu_threads.memory_spans(flat.size, flat.nbytes, grain=_BLOCK))
        return out.reshape(a.shape)

    wrapper.__name__ = kernel.__name__
    wrapper.__doc__ = kernel.__doc__
    return wrapper


def _elementwise(kernel: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """A multi-pass float kernel: half inputs computed in float32, big arrays block by block."""
    return _in_float32(_blockwise(kernel))


# ---- linear ---------------------------------------------------------------------------------------------
@_in_float32
def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """x @ w.T + b with one BLAS call; the bias is added in place into the product."""
    if x.ndim > 2:
        out = cpu_blas.matmul(x.reshape(-1, x.shape[-1]), w.T)  # (B*T, out)
        out = out.reshape(x.shape[:-1] + out.shape[-1:])  # (B, T, out)
    else:
        out = np.asarray(cpu_blas.matmul(x, w.T) if x.ndim == 2 else np.dot(x, w.T))
    if b is not None:
        out += b
    return out


# ---- activations ----------------------------------------------------------------------------------------
# Abramowitz & Stegun 7.1.26, the erf of PyTorch's vectorized float32 kernels (|error| < 1.5e-7): the 0.5 of
# gelu is folded into the coefficients and the 1/sqrt(2) of its argument into t's scale
_AS_P = 0.3275911 * _SQRT_HALF
_AS_A = tuple(0.5 * c for c in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))


@_elementwise
def gelu(a: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        inner = a * a
        inner *= 0.044715 * _SQRT_2_OVER_PI
        inner += _SQRT_2_OVER_PI
        inner *= a
        out = np.tanh(inner, out=inner)
        out += 1
        out *= a
        out *= 0.5
        return out
    if a.dtype != np.float32:
        from serve.backend.ops_cpu import erf

        out = erf(a * _SQRT_HALF)
        out += 1
        out *= a
        out *= 0.5
        return out
    return _gelu_float32(a)


def _gelu_float32(x: np.ndarray) -> np.ndarray:
    """gelu(x) = relu(x) - 0.5 |x| erfc(|x| / sqrt(2)), with erfc(z) = t * poly(t) * exp(-z^2)."""
    a = np.abs(x)
    t = a * np.float32(_AS_P)
    t += 1
    np.reciprocal(t, out=t)
    r = t * np.float32(_AS_A[0])
    for c in _AS_A[1:]:
        r += np.float32(c)
        r *= t
    e = np.multiply(x, x)
    e *= -0.5
    np.exp(e, out=e)
    r *= e
    r *= a
    out = np.maximum(x, 0)
    out -= r
    return out


@_elementwise
def silu(a: np.ndarray) -> np.ndarray:
    out = np.negative(a)
    np.exp(out, out=out)
    out += 1
    return np.divide(a, out, out=out)


@_elementwise
def elu(a: np.ndarray, alpha: float, scale: float, input_scale: float) -> np.ndarray:
    """scale * (a if a > 0 else alpha * (exp(a * input_scale) - 1)): ELU, SELU and CELU in one."""
    # max(a, 0) + alpha * expm1(min(a, 0)): each side is 0 where the other applies, and no slow np.where
    neg = np.minimum(a, 0)
    if input_scale != 1:
        neg *= input_scale
    np.expm1(neg, out=neg)
    neg *= alpha
    out = np.maximum(a, 0)
    out += neg
    if scale != 1:
        out *= scale
    return out


def _in_memory_order(a: np.ndarray, perm: list[int] | None = None) -> np.ndarray | None:
    """a as a 1-D view in memory order when its elements fill one block in C order or a permutation of it (a
    channels-last activation), else None. `perm` forces the axis order (another array's)."""
    if perm is None and a.flags.c_contiguous:
        return a.reshape(-1)
    t = a.transpose(perm if perm is not None else sorted(range(a.ndim), key=lambda i: -a.strides[i]))
    return t.reshape(-1) if t.flags.c_contiguous else None


_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide}


def binary_(name: str, a: np.ndarray, b: Any) -> np.ndarray:
    """`a op= b` (op: add, sub, mul or div) into a's storage; a big a in blocks on the lanes, when b is a scalar
    or an array of a's shape laid out as a is (channels-last activations included)."""
    op = _BINARY[name]
    if a.nbytes < cpu_threads.SPLIT_BYTES or cpu_threads.get_num_threads() == 1:
        return op(a, b, out=a)
    perm = sorted(range(a.ndim), key=lambda i: -a.strides[i])
    fa = _in_memory_order(a, perm)
    fb = b if not isinstance(b, np.ndarray) else (_in_memory_order(b, perm) if b.shape == a.shape else None)
    if fa is None or fb is None:
        return op(a, b, out=a)
    if isinstance(fb, np.ndarray):
        cpu_threads.parallel(lambda i0, i1: op(fa[i0:i1], fb[i0:i1], out=fa[i0:i1]),
                             cpu_threads.memory_spans(fa.size, a.nbytes))  # fmt: skip
    else:
        cpu_threads.parallel(
            lambda i0, i1: op(fa[i0:i1], fb, out=fa[i0:i1]), cpu_threads.memory_spans(fa.size, a.nbytes)
        )
    return a


def relu_(a: np.ndarray) -> np.ndarray:
    flat = _in_memory_order(a)
    if flat is None or flat.nbytes < cpu_threads.SPLIT_BYTES:
        return np.maximum(a, 0, out=a)
    cpu_threads.parallel(lambda i0, i1: np.maximum(flat[i0:i1], 0, out=flat[i0:i1]), cpu_threads.spans(flat.size))
    return a


def leaky_relu(a: np.ndarray, slope: float) -> np.ndarray:
    if 0 <= slope <= 1:
        return np.maximum(a, a * slope)
    out = np.minimum(a, 0)
    out *= slope
    out += np.maximum(a, 0)
    return out


def hardtanh(a: np.ndarray, low: float, high: float) -> np.ndarray:
    out = np.maximum(a, low)
    return np.minimum(out, high, out=out)


@_elementwise
def hardswish(a: np.ndarray) -> np.ndarray:
    out = a + 3
    np.clip(out, 0, 6, out=out)
    out *= a
    out /= 6
    return out


@_in_float32
def hardsigmoid(a: np.ndarray) -> np.ndarray:
    out = a / 6
    out += 0.5
    return np.clip(out, 0, 1, out=out)


def _softplus(z: np.ndarray) -> np.ndarray:
    """log(1 + exp(z)) = max(z, 0) + log(1 + exp(-|z|)), which never overflows (np.logaddexp is 50x slower)."""
    tail = np.abs(z)
    np.negative(tail, out=tail)
    np.exp(tail, out=tail)
    tail += 1
    np.log(tail, out=tail)
    tail += np.maximum(z, 0)
    return tail


@_elementwise
def softplus(a: np.ndarray, beta: float, threshold: float) -> np.ndarray:
    z = a * beta if beta != 1 else a
    out = _softplus(z)
    if beta != 1:
        out /= beta
    linear = z > threshold
    if linear.any():  # PyTorch returns the input itself there
        np.copyto(out, a, where=linear)
    return out


@_elementwise
def log_sigmoid(a: np.ndarray) -> np.ndarray:
    return np.negative(_softplus(np.negative(a)))


@_elementwise
def mish(a: np.ndarray) -> np.ndarray:
    out = _softplus(a)
    np.tanh(out, out=out)
    out *= a
    return out


def threshold(a: np.ndarray, threshold: float, value: float) -> np.ndarray:
    return np.where(a <= threshold, np.asarray(value, a.dtype), a)  # NaN is kept, as in PyTorch


# ---- normalization --------------------------------------------------------------------------------------
def _centered(a: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, int]:
    """(mean over `axes` kept as size-1 dims, a - mean, the count reduced), in float32 for half inputs."""
    x = a.astype(np.float32) if a.dtype.num in _HALF_NUMS else a
    n = math.prod(x.shape[i] for i in axes)
    mean = np.add.reduce(x, axes, None, None, True) / max(n, 1)  # type: ignore[call-overload]
    return mean, x - mean, n


def _sum_of_squares(d: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    return np.add.reduce(d * d, axes, None, None, True)  # type: ignore[call-overload]


def moments(a: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and biased variance over `axes` (kept as size-1 dims), in float32 for half inputs."""
    mean, d, n = _centered(a, axes)
    return mean, _sum_of_squares(d, axes) / max(n, 1)


def standardize(a: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    """(a - mean) / sqrt(var + eps) over `axes`, with the biased variance: every normalization layer's core."""
    _, out, n = _centered(a, axes)
    var = _sum_of_squares(out, axes)
    var /= max(n, 1)
    var += eps
    out /= np.sqrt(var, out=var)
    return out.astype(a.dtype, copy=False)


@_in_float32
def layer_norm(a: np.ndarray, w: np.ndarray | None, b: np.ndarray | None, k: int, eps: float) -> np.ndarray:
    """Normalize over the last `k` dims, then scale by w and shift by b (either may be None)."""
    shape = a.shape
    n = math.prod(shape[a.ndim - k :]) or 1
    x = a.reshape(-1, n)  # (rows, normalized elements)
    out = np.empty(x.shape, np.result_type(x, np.float32))
    ones = np.full(n, 1 / n, x.dtype)

    def rows(r0: int, r1: int) -> None:
        o = out[r0:r1]
        np.subtract(x[r0:r1], (x[r0:r1] @ ones)[:, None], out=o)  # row means by one BLAS matrix-vector product
        var = np.einsum("ij,ij->i", o, o)  # one pass, no squared temporary
        var *= 1 / n
        var += eps
        o /= np.sqrt(var, out=var)[:, None]
        if w is not None:
            o *= w.reshape(-1)
        if b is not None:
            o += b.reshape(-1)

    cpu_threads.parallel(rows, cpu_threads.memory_spans(len(x), x.nbytes))
    return out.reshape(shape)


def batch_norm_eval(a: np.ndarray, mean: np.ndarray, var: np.ndarray, w: np.ndarray | None,
                    b: np.ndarray | None, eps: float) -> np.ndarray:  # fmt: skip
    """Inference batch norm folded into one scale and one shift per channel (dim 1): two passes over `a`."""
    x = a.astype(np.float32) if a.dtype.num in _HALF_NUMS else a
    scale = np.reciprocal(np.sqrt(var.astype(x.dtype) + eps))  # (C,)
    if w is not None:
        scale *= w
    shift = mean.astype(x.dtype) * -scale
    if b is not None:
        shift += b
    bshape = (-1,) + (1,) * (a.ndim - 2)  # (C, 1, 1): broadcasts over the spatial dims
    scale, shift = scale.reshape(bshape), shift.reshape(bshape)
    out = np.empty(x.shape, x.dtype)
    if x.nbytes < cpu_threads.SPLIT_BYTES or x.ndim < 2:
        _scale_shift(x, scale, shift, out)
    elif len(x) > 1:  # lanes take samples, else channels
        cpu_threads.parallel(lambda i0, i1: _scale_shift(x[i0:i1], scale, shift, out[i0:i1]),
                             cpu_threads.spans(len(x)))  # fmt: skip
    else:
        cpu_threads.parallel(lambda c0, c1: _scale_shift(x[:, c0:c1], scale[c0:c1], shift[c0:c1], out[:, c0:c1]),
                             cpu_threads.spans(x.shape[1]))  # fmt: skip
    return out.astype(a.dtype, copy=False)


def _scale_shift(x: np.ndarray, scale: np.ndarray, shift: np.ndarray, out: np.ndarray) -> None:
    np.multiply(x, scale, out=out)
    out += shift


# ---- embedding bags -------------------------------------------------------------------------------------
def bag_ids(offsets: np.ndarray, n: int) -> np.ndarray:
    """The bag of each of `n` positions, bag i starting at offsets[i] (offsets sorted, offsets[0] == 0)."""
    return np.searchsorted(offsets, np.arange(n), side="right") - 1


def bag_counts(ids: np.ndarray, num_bags: int) -> np.ndarray:
    return np.bincount(ids, minlength=num_bags)


def bag_positions(ids: np.ndarray, num_bags: int) -> np.ndarray:
    """(num_bags, longest bag): the positions in each bag, padded with len(ids); `ids` ascending."""
    counts = np.bincount(ids, minlength=num_bags)
    out = np.full((num_bags, int(counts.max(initial=0))), ids.size, np.int64)
    starts = np.cumsum(counts) - counts
    positions = np.arange(ids.size)
    out[ids, positions - starts[ids]] = positions  # (bag, rank within the bag) -> position
    return out


# ---- dropout --------------------------------------------------------------------------------------------
def dropout_mask(gen: np.random.Generator, shape: tuple[int, ...], keep: float, dt: np.dtype) -> np.ndarray:
    """1/keep with probability `keep`, else 0 (all zeros when keep is 0): PyTorch's inverted-dropout mask."""
    mask = (gen.random(shape, dtype=np.float32) < keep).astype(dt)
    if keep > 0:
        mask *= np.asarray(1 / keep, dt)
    return mask


# ---- initialisation helpers -----------------------------------------------------------------------------
def erfinv(a: np.ndarray) -> np.ndarray:
    """The inverse error function: Giles' approximation refined by two Newton steps on float64 erf."""
    from serve.backend.ops_cpu import erf

    given = np.asarray(a, dtype=np.float64)
    y = np.where(np.abs(given) < 1, given, 0.0)  # the ends (+-inf) and outside (nan) are set at the end
    w = -np.log1p(-y * y)
    central = w < 5
    wc = w - 2.5
    pc = _horner((2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                  -0.00125372503, -0.00417768164, 0.246640727, 1.50140941), wc)  # fmt: skip
    wt = np.sqrt(np.where(central, 5.0, w)) - 3
    pt = _horner((-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                  -0.0076224613, 0.00943887047, 1.00167406, 2.83297682), wt)  # fmt: skip
    x = np.where(central, pc, pt) * y
    for _ in range(2):
        x -= (erf(x) - y) / (2 / math.sqrt(math.pi) * np.exp(-x * x))
    x = np.where(np.abs(given) == 1, np.copysign(np.inf, given), np.where(np.abs(given) > 1, np.nan, x))
    return x.astype(a.dtype) if a.dtype.kind == "f" or a.dtype.num in _HALF_NUMS else x


def _horner(coefs: tuple[float, ...], x: np.ndarray) -> np.ndarray:
    out = np.full_like(x, coefs[0])
    for c in coefs[1:]:
        out *= x
        out += c
    return out


def orthogonal(gaussian: np.ndarray) -> np.ndarray:
    """An orthogonal (rows, cols) matrix from a gaussian one: Q of its QR, signs fixed by R's diagonal."""
    rows, cols = gaussian.shape
    flat = gaussian.astype(np.float64)
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diagonal(r))
    return (q.T if rows < cols else q).astype(gaussian.dtype)
