"""CUDA backend: the array kernels behind `serve.nn.functional` (linear, activations, normalization) on CuPy.

The names and semantics of `cpu_nn`. Linear is one cuBLAS GEMM plus our fused bias kernel; GELU, SiLU and ReLU,
softmax, LayerNorm, the GroupNorm/InstanceNorm core (`standardize`) and inference BatchNorm run our kernels
(`cuda_kernels`) for float32/float16/bfloat16 and compute in float32 inside them. The rarer activations are
CuPy elementwise expressions, computed in float32 for half inputs and rounded once, as `cpu_nn` does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import cupy
import ml_dtypes
import numpy as np

from serve.backend import cuda_kernels as K
from serve.backend import ops_cpu as _host

__all__ = [
    "bag_counts", "bag_ids", "bag_positions", "batch_norm_eval", "binary_", "dropout_mask", "elu", "erfinv", "gelu",
    "hardsigmoid", "hardswish", "hardtanh", "layer_norm", "leaky_relu", "linear", "log_sigmoid", "mish", "moments",
    "orthogonal", "relu_", "silu", "softplus", "standardize", "threshold",
]  # fmt: skip

_HALF_NUMS = frozenset((np.dtype(np.float16).num, np.dtype(ml_dtypes.bfloat16).num))
_KERNEL_NUMS = _HALF_NUMS | {np.dtype(np.float32).num}
_SQRT_HALF = 1 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _kernel_ok(a: Any) -> bool:
    return a.dtype.num in _KERNEL_NUMS and a.size > 0


def _in_float32(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """Run `kernel` on float32 copies of half-precision arrays and round its result back once."""

    def wrapper(a: cupy.ndarray, *args: Any) -> cupy.ndarray:
        if a.dtype.num in _HALF_NUMS:
            args = tuple(x.astype(np.float32) if isinstance(x, cupy.ndarray) else x for x in args)
            return kernel(a.astype(np.float32), *args).astype(a.dtype)
        return kernel(a, *args)

    wrapper.__name__ = kernel.__name__
    wrapper.__doc__ = kernel.__doc__
    return wrapper


# ---- linear ---------------------------------------------------------------------------------------------
def linear(x: cupy.ndarray, w: cupy.ndarray, b: cupy.ndarray | None) -> cupy.ndarray:
    """x @ w.T + b: one cuBLAS GEMM (half stays half, accumulating in float32), the bias added in place by our
    fused kernel (computed in float32, rounded once)."""
    from serve.backend.ops_cuda import gemm

    if w.dtype != x.dtype:
        w = w.astype(x.dtype)
    flat = x.reshape(-1, x.shape[-1]) if x.ndim != 2 else x  # (B*T, in)
    out = gemm(flat, w.T)  # (B*T, out)
    if b is not None:
        if _kernel_ok(out) and out.flags.c_contiguous:
            K.bias_activation(out, None, b, "none", 1, out=out)
        else:
            out += b.astype(out.dtype, copy=False)
    return out.reshape(x.shape[:-1] + out.shape[-1:]) if x.ndim != 2 else out


# ---- activations ----------------------------------------------------------------------------------------
def gelu(a: cupy.ndarray, approximate: str) -> cupy.ndarray:
    if _kernel_ok(a):
        return K.activation(a, "gelu_tanh" if approximate == "tanh" else "gelu")
    if approximate == "tanh":
        inner = a * a
        inner *= 0.044715 * _SQRT_2_OVER_PI
        inner += _SQRT_2_OVER_PI
        inner *= a
        return 0.5 * a * (1 + cupy.tanh(inner))
    from cupyx.scipy import special

    return 0.5 * a * (1 + special.erf(a * _SQRT_HALF))


def silu(a: cupy.ndarray) -> cupy.ndarray:
    if _kernel_ok(a):
        return K.activation(a, "silu")
    return a / (1 + cupy.exp(-a))


@_in_float32
def elu(a: cupy.ndarray, alpha: float, scale: float, input_scale: float) -> cupy.ndarray:
    """scale * (a if a > 0 else alpha * (exp(a * input_scale) - 1)): ELU, SELU and CELU in one."""
    neg = cupy.minimum(a, 0)
    if input_scale != 1:
        neg *= input_scale
    cupy.expm1(neg, out=neg)
    neg *= alpha
    out = cupy.maximum(a, 0)
    out += neg
    if scale != 1:
        out *= scale
    return out


_BINARY = {"add": cupy.add, "sub": cupy.subtract, "mul": cupy.multiply, "div": cupy.true_divide}


def binary_(name: str, a: cupy.ndarray, b: Any) -> cupy.ndarray:
    """`a op= b` (op: add, sub, mul or div) into a's storage (one kernel: the GPU needs no lanes)."""
    return _BINARY[name](a, b, out=a)


def relu_(a: cupy.ndarray) -> cupy.ndarray:
    return cupy.maximum(a, 0, out=a)


def leaky_relu(a: cupy.ndarray, slope: float) -> cupy.ndarray:
    if 0 <= slope <= 1:
        return cupy.maximum(a, a * slope)
    out = cupy.minimum(a, 0)
    out *= slope
    out += cupy.maximum(a, 0)
    return out


def hardtanh(a: cupy.ndarray, low: float, high: float) -> cupy.ndarray:
    out = cupy.maximum(a, low)
    return cupy.minimum(out, high, out=out)


@_in_float32
def hardswish(a: cupy.ndarray) -> cupy.ndarray:
    out = a + 3
    cupy.clip(out, 0, 6, out=out)
    out *= a
    out /= 6
    return out


@_in_float32
def hardsigmoid(a: cupy.ndarray) -> cupy.ndarray:
    out = a / 6
    out += 0.5
    return cupy.clip(out, 0, 1, out=out)


def _softplus(z: cupy.ndarray) -> cupy.ndarray:
    """log(1 + exp(z)) = max(z, 0) + log1p(exp(-|z|)), which never overflows."""
    return cupy.maximum(z, 0) + cupy.log1p(cupy.exp(-cupy.abs(z)))


@_in_float32
def softplus(a: cupy.ndarray, beta: float, threshold: float) -> cupy.ndarray:
    z = a * beta if beta != 1 else a
    out = _softplus(z)
    if beta != 1:
        out /= beta
    return cupy.where(z > threshold, a, out)  # PyTorch returns the input itself there


@_in_float32
def log_sigmoid(a: cupy.ndarray) -> cupy.ndarray:
    return -_softplus(-a)


@_in_float32
def mish(a: cupy.ndarray) -> cupy.ndarray:
    return a * cupy.tanh(_softplus(a))


def threshold(a: cupy.ndarray, threshold: float, value: float) -> cupy.ndarray:
    fill = cupy.asarray(np.asarray(value, a.dtype))
    return cupy.where(a <= threshold, fill, a)  # NaN is kept, as in PyTorch


# ---- normalization --------------------------------------------------------------------------------------
def _trailing(a: cupy.ndarray, axes: tuple[int, ...]) -> int:
    """How many elements a row has when `axes` are exactly the trailing dims of `a`, else 0."""
    axes = tuple(sorted(x % a.ndim for x in axes))
    if not axes or axes != tuple(range(a.ndim - len(axes), a.ndim)):
        return 0
    return math.prod(a.shape[i] for i in axes)


def _kept(a: cupy.ndarray, axes: tuple[int, ...]) -> tuple[int, ...]:
    """a's shape with `axes` kept as size-1 dims."""
    reduced = {x % a.ndim for x in axes}
    return tuple(1 if i in reduced else n for i, n in enumerate(a.shape))


def _centered(a: cupy.ndarray, axes: tuple[int, ...]) -> tuple[cupy.ndarray, cupy.ndarray, int]:
    x = a.astype(np.float32) if a.dtype.num in _HALF_NUMS else a
    n = math.prod(x.shape[i] for i in axes)
    mean = cupy.sum(x, axis=axes, keepdims=True) / max(n, 1)
    return mean, x - mean, n


def moments(a: cupy.ndarray, axes: tuple[int, ...]) -> tuple[cupy.ndarray, cupy.ndarray]:
    """Mean and biased variance over `axes` (kept as size-1 dims), in float32 for half inputs."""
    n = _trailing(a, axes)
    if n and _kernel_ok(a):
        mean, var = K.row_moments(cupy.ascontiguousarray(a), n)
        shape = _kept(a, axes)
        return mean.reshape(shape), var.reshape(shape)
    mean, d, n = _centered(a, axes)
    return mean, cupy.sum(d * d, axis=axes, keepdims=True) / max(n, 1)


def standardize(a: cupy.ndarray, axes: tuple[int, ...], eps: float) -> cupy.ndarray:
    """(a - mean) / sqrt(var + eps) over `axes`, with the biased variance: every normalization layer's core."""
    n = _trailing(a, axes)
    if n and _kernel_ok(a):
        return K.standardize_rows(cupy.ascontiguousarray(a), n, eps).reshape(a.shape)
    _, out, n = _centered(a, axes)
    var = cupy.sum(out * out, axis=axes, keepdims=True) / max(n, 1)
    out /= cupy.sqrt(var + eps)
    return out.astype(a.dtype, copy=False)


def layer_norm(a: cupy.ndarray, w: cupy.ndarray | None, b: cupy.ndarray | None, k: int, eps: float) -> cupy.ndarray:
    """Normalize over the last `k` dims, then scale by w and shift by b (either may be None)."""
    n = math.prod(a.shape[a.ndim - k :]) or 1
    if _kernel_ok(a):
        flat_w = None if w is None else w.reshape(-1)
        flat_b = None if b is None else b.reshape(-1)
        return K.layer_norm(cupy.ascontiguousarray(a), flat_w, flat_b, n, eps).reshape(a.shape)
    x = a.reshape(-1, n)  # (rows, normalized elements)
    out = x - x.mean(axis=1, keepdims=True)
    var = (out * out).mean(axis=1, keepdims=True)
    out /= cupy.sqrt(var + eps)
    if w is not None:
        out *= w.reshape(-1)
    if b is not None:
        out += b.reshape(-1)
    return out.reshape(a.shape)


def batch_norm_eval(a: cupy.ndarray, mean: cupy.ndarray, var: cupy.ndarray, w: cupy.ndarray | None,
                    b: cupy.ndarray | None, eps: float) -> cupy.ndarray:  # fmt: skip
    """Inference batch norm folded into one scale and one shift per channel (dim 1), applied by one fused kernel."""
    ct = np.float64 if a.dtype == np.float64 else np.float32
    scale = 1 / cupy.sqrt(var.astype(ct) + eps)  # (C,)
    if w is not None:
        scale *= w.astype(ct, copy=False)
    shift = mean.astype(ct) * -scale
    if b is not None:
        shift += b.astype(ct, copy=False)
    if _kernel_ok(a):
        return K.bias_activation(a, scale, shift, "none", math.prod(a.shape[2:]))
    bshape = (-1,) + (1,) * (a.ndim - 2)  # (C, 1, 1): broadcasts over the spatial dims
    return (a.astype(ct) * scale.reshape(bshape) + shift.reshape(bshape)).astype(a.dtype, copy=False)


# ---- embedding bags -------------------------------------------------------------------------------------
def bag_ids(offsets: cupy.ndarray, n: int) -> cupy.ndarray:
    """The bag of each of `n` positions, bag i starting at offsets[i] (offsets sorted, offsets[0] == 0)."""
    return cupy.searchsorted(cupy.asarray(offsets), cupy.arange(n), side="right") - 1


def bag_counts(ids: cupy.ndarray, num_bags: int) -> cupy.ndarray:
    return cupy.bincount(ids, minlength=num_bags)


def bag_positions(ids: cupy.ndarray, num_bags: int) -> cupy.ndarray:
    """(num_bags, longest bag): the positions in each bag, padded with len(ids); `ids` ascending."""
    counts = cupy.bincount(ids, minlength=num_bags)
    longest = int(counts.max()) if counts.size else 0
    out = cupy.full((num_bags, longest), ids.size, np.int64)
    starts = cupy.cumsum(counts) - counts
    positions = cupy.arange(ids.size)
    if ids.size:
        out[ids, positions - starts[ids]] = positions  # (bag, rank within the bag) -> position
    return out


# ---- dropout --------------------------------------------------------------------------------------------
def dropout_mask(gen: np.random.Generator, shape: tuple[int, ...], keep: float, dt: np.dtype) -> cupy.ndarray:
    """ops_cpu's mask, drawn on the host from the same generator and copied over (same values for a seed)."""
    from serve.backend.ops_cuda import from_numpy

    return from_numpy(_host.dropout_mask(gen, shape, keep, dt))


# ---- initialisation helpers -----------------------------------------------------------------------------
def erfinv(a: cupy.ndarray) -> cupy.ndarray:
    """The inverse error function in float64, cast back to a float input's dtype (float64 for integers)."""
    from cupyx.scipy import special

    out = special.erfinv(a.astype(np.float64))
    return out.astype(a.dtype) if a.dtype.kind == "f" or a.dtype.num in _HALF_NUMS else out


def orthogonal(gaussian: cupy.ndarray) -> cupy.ndarray:
    """ops_cpu's orthogonal matrix (a host QR), copied over: initialisation is not a hot path."""
    from serve.backend.ops_cuda import from_numpy, to_numpy

    return from_numpy(_host.orthogonal(to_numpy(gaussian)))
