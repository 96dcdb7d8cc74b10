"""The CUDA backend: serve's primitive set (the public names of `ops_cpu`) on CuPy arrays.

Same names, signatures, semantics and result dtypes as `ops_cpu`; only the arrays differ. Matrix products go
to cuBLAS through `cupy.matmul` (half-precision GEMMs accumulate in float32), our own kernels
(`cuda_kernels`) do softmax, normalization, fused bias+activation, pooling, im2col and embedding gathers,
and the rest maps onto CuPy's numpy-like functions. Operations run on the current device and stream:
`on_device(index)` (used by creation and `.to("cuda:N")`) makes device N current for a block.

Random numbers are drawn on the host with `ops_cpu`'s numpy generator and copied over, so a seed gives the
same values on CPU and GPU. Transfers to the host go through pinned (page-locked) staging buffers from
CuPy's pinned memory pool (D2H copies into pinned memory run at full PCIe/NVLink bandwidth).

Importing this module raises RuntimeError("CUDA is not available: ...") when CuPy sees no device.
"""

from __future__ import annotations

import contextlib
from typing import Any

import ml_dtypes
import numpy as np

from serve.backend import cuda_runtime

cuda_runtime.require()  # before cupy is used: a clear RuntimeError rather than a CUDA driver error later

import cupy  # noqa: E402
import cupyx  # noqa: E402
from cupy._core import _routines_linalg as _linalg  # noqa: E402

from serve.backend import cuda_kernels as K  # noqa: E402
from serve.backend import flags  # noqa: E402
from serve.backend import ops_cpu as _host  # noqa: E402

ndarray = cupy.ndarray
_F32 = np.dtype(np.float32)
_HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
_HALF_NUMS = frozenset(d.num for d in _HALF)
_KERNEL_DTYPES = frozenset((_F32.num, *_HALF_NUMS))  # what cuda_kernels take (storage type, float32 math)
_PINNED_MIN = 1 << 16  # below this many bytes a plain (pageable) copy is as fast as staging through pinned memory


def _is_half(dt: Any) -> bool:
    return np.dtype(dt).num in _HALF_NUMS


def _kernel_ok(a: Any) -> bool:
    """Whether `a` has a dtype our kernels take (float32, float16, bfloat16)."""
    return a.dtype.num in _KERNEL_DTYPES


def _acc(a: cupy.ndarray) -> cupy.ndarray:
    return a.astype(np.float32) if a.dtype.num in _HALF_NUMS else a


# ---- devices and transfers ----------------------------------------------------------------------------
def on_device(index: int | None) -> Any:
    """A context making CUDA device `index` current (the current one for None)."""
    return contextlib.nullcontext() if index is None else cupy.cuda.Device(index)


def current_device() -> int:
    return int(cupy.cuda.runtime.getDevice())


def from_numpy(a: Any) -> cupy.ndarray:
    """A copy of host array `a` on the current device. (A pageable source is staged through pinned memory by the
    driver itself: staging it through our own pinned buffer first would add a host copy and a stream sync.)"""
    return cupy.asarray(np.ascontiguousarray(a))


def to_numpy(a: cupy.ndarray) -> np.ndarray:
    """An ordinary numpy copy of `a` (big arrays copied through a pinned staging buffer at full bandwidth)."""
    with a.device:  # `a` may live on another device than the current one (a "cuda:1" -> "cuda:0" copy)
        if a.nbytes < _PINNED_MIN:
            return cupy.asnumpy(a)
        src = cupy.ascontiguousarray(a)
        staged = cupyx.empty_pinned(src.shape, src.dtype)
        src.get(out=staged)  # blocking: done when it returns
    return np.array(staged)  # a pageable copy: the pinned block goes back to CuPy's pool


# ---- creation and conversion -----------------------------------------------------------------------
def asarray(a: Any, dtype: Any = None) -> cupy.ndarray:
    if isinstance(a, cupy.ndarray):
        return a if dtype is None or a.dtype == np.dtype(dtype) else a.astype(dtype)
    return from_numpy(np.asarray(a, dtype=dtype))


def array(a: Any, dtype: Any = None, copy: bool = True) -> cupy.ndarray:
    if isinstance(a, cupy.ndarray):
        return a.astype(a.dtype if dtype is None else dtype, copy=copy)
    return from_numpy(np.asarray(a, dtype=dtype))


def empty(shape: Any, dtype: Any = float) -> cupy.ndarray:
    return cupy.empty(shape, dtype)


def zeros(shape: Any, dtype: Any = float) -> cupy.ndarray:
    return cupy.zeros(shape, dtype)


def ones(shape: Any, dtype: Any = float) -> cupy.ndarray:
    return full(shape, 1, dtype)


def full(shape: Any, fill_value: Any, dtype: Any = None) -> cupy.ndarray:
    dt = np.asarray(fill_value).dtype if dtype is None else np.dtype(dtype)
    if dt.num in _HALF_NUMS:  # rounded on the host as ops_cpu does, filled as float32 and cast (exact)
        exact = float(np.asarray(fill_value, dtype=dt).astype(np.float32))
        return cupy.full(shape, exact, np.float32).astype(dt)
    return cupy.full(shape, fill_value, dt)


def eye(n: int, m: int | None = None, k: int = 0, dtype: Any = float) -> cupy.ndarray:
    dt = np.dtype(dtype)
    if dt.num in _HALF_NUMS:
        return cupy.eye(n, m, k, dtype=np.float32).astype(dt)
    return cupy.eye(n, m, k, dtype=dt)


def ascontiguousarray(a: Any) -> cupy.ndarray:
    return cupy.ascontiguousarray(asarray(a))


def shares_memory(a: Any, b: Any) -> bool:
    if not (isinstance(a, cupy.ndarray) and isinstance(b, cupy.ndarray)):
        return False
    return bool(cupy.shares_memory(a, b))


def astype(a: cupy.ndarray, dt: Any) -> cupy.ndarray:
    return a.astype(dt)


def arange(start: float, end: float, step: float, dt: np.dtype) -> cupy.ndarray:
    # computed in float64 then cast, as on the CPU (PyTorch's start + i * step)
    n = max(int(np.ceil((end - start) / step)), 0)
    if dt.kind in "iub":
        return (start + step * cupy.arange(n, dtype=np.int64)).astype(dt)
    return (start + step * cupy.arange(n, dtype=np.float64)).astype(dt)


def linspace(start: float, end: float, steps: int, dt: np.dtype) -> cupy.ndarray:
    return from_numpy(_host.linspace(start, end, steps, dt))


# ---- random: drawn on the host by ops_cpu's generator (same values for a seed on every device) -------------
generator = _host.generator


def uniform(gen: np.random.Generator, shape: tuple, dt: np.dtype, low: float = 0.0, high: float = 1.0) -> Any:
    return from_numpy(_host.uniform(gen, shape, dt, low, high))


def normal(gen: np.random.Generator, shape: tuple, dt: np.dtype, mean: Any = 0.0, std: Any = 1.0) -> Any:
    if isinstance(mean, cupy.ndarray) or isinstance(std, cupy.ndarray):
        z = from_numpy(gen.standard_normal(shape))  # float64, as ops_cpu draws for array parameters
        return (z * std + mean).astype(dt)
    return from_numpy(_host.normal(gen, shape, dt, mean, std))


def integers(gen: np.random.Generator, low: int, high: int, shape: tuple, dt: np.dtype) -> cupy.ndarray:
    return from_numpy(_host.integers(gen, low, high, shape, dt))


def permutation(gen: np.random.Generator, n: int, dt: np.dtype) -> cupy.ndarray:
    return from_numpy(_host.permutation(gen, n, dt))


def bernoulli(gen: np.random.Generator, p: cupy.ndarray, dt: np.dtype) -> cupy.ndarray:
    return (from_numpy(gen.random(p.shape)) < p).astype(dt)


# ---- elementwise ----------------------------------------------------------------------------------
neg = cupy.negative
abs = cupy.absolute
exp = cupy.exp
log = cupy.log
log1p = cupy.log1p
expm1 = cupy.expm1
sqrt = cupy.sqrt
sin = cupy.sin
cos = cupy.cos
tan = cupy.tan
tanh = cupy.tanh
sign = cupy.sign
floor = cupy.floor
ceil = cupy.ceil
trunc = cupy.trunc
round = cupy.around
reciprocal = cupy.reciprocal
isnan = cupy.isnan
isinf = cupy.isinf
isfinite = cupy.isfinite
logical_not = cupy.logical_not
bitwise_not = cupy.invert

add = cupy.add
sub = cupy.subtract
mul = cupy.multiply
div = cupy.true_divide
floor_divide = cupy.floor_divide
remainder = cupy.remainder
power = cupy.power
maximum = cupy.maximum
minimum = cupy.minimum
fmax = cupy.fmax
eq = cupy.equal
ne = cupy.not_equal
lt = cupy.less
le = cupy.less_equal
gt = cupy.greater
ge = cupy.greater_equal
logical_and = cupy.logical_and
logical_or = cupy.logical_or
logical_xor = cupy.logical_xor
bitwise_and = cupy.bitwise_and
bitwise_or = cupy.bitwise_or
bitwise_xor = cupy.bitwise_xor
clip = cupy.clip


def where(cond: Any, x: Any, y: Any) -> cupy.ndarray:
    return cupy.where(cond, x, y)


def copyto(dst: cupy.ndarray, src: Any, **kw: Any) -> None:
    cupy.copyto(dst, src if isinstance(src, cupy.ndarray) or np.isscalar(src) else asarray(src), **kw)


def array2string(a: Any, *args: Any, **kw: Any) -> str:
    return np.array2string(to_numpy(a) if isinstance(a, cupy.ndarray) else a, *args, **kw)


def rsqrt(a: cupy.ndarray) -> cupy.ndarray:
    out = cupy.sqrt(a)
    return cupy.divide(1, out, out=out)


def sigmoid(a: cupy.ndarray) -> cupy.ndarray:
    out = cupy.exp(cupy.negative(a))  # exp overflows harmlessly to inf for very negative x: 1 / inf = 0
    out += 1
    return cupy.reciprocal(out, out=out)


def relu(a: cupy.ndarray) -> cupy.ndarray:
    if _kernel_ok(a) and a.size:
        return K.activation(a, "relu")
    return cupy.maximum(a, 0)


def erf(a: cupy.ndarray) -> cupy.ndarray:
    """erf in float64 (as ops_cpu computes it), cast back to a float input's dtype; float64 for integers."""
    from cupyx.scipy import special

    out = special.erf(a.astype(np.float64))
    return out.astype(a.dtype, copy=False) if a.dtype.kind == "f" or a.dtype.num in _HALF_NUMS else out


# ---- reductions -----------------------------------------------------------------------------------
def sum(a: cupy.ndarray, axis: Any, keepdims: bool, dt: np.dtype) -> cupy.ndarray:
    if a.dtype.num in _HALF_NUMS or np.dtype(dt).num in _HALF_NUMS:
        return cupy.sum(a.astype(np.float32), axis=axis, keepdims=keepdims).astype(dt)
    return cupy.sum(a, axis=axis, dtype=dt, keepdims=keepdims)


def prod(a: cupy.ndarray, axis: Any, keepdims: bool, dt: np.dtype) -> cupy.ndarray:
    return cupy.prod(_acc(a), axis=axis, keepdims=keepdims).astype(dt)


def amax(a: cupy.ndarray, axis: Any, keepdims: bool) -> cupy.ndarray:
    return cupy.amax(_acc(a), axis=axis, keepdims=keepdims).astype(a.dtype, copy=False)


def amin(a: cupy.ndarray, axis: Any, keepdims: bool) -> cupy.ndarray:
    return cupy.amin(_acc(a), axis=axis, keepdims=keepdims).astype(a.dtype, copy=False)


def _arg_reduce(fn: Any, a: cupy.ndarray, axis: Any, keepdims: bool) -> cupy.ndarray:
    x = _acc(a)
    out = fn(x, axis=axis)
    if x.dtype.kind == "f":  # numpy's (and PyTorch's) answer for a NaN: the index of the first NaN
        nan = cupy.isnan(x)
        out = cupy.where(cupy.any(nan, axis=axis), cupy.argmax(nan, axis=axis), out)
    if keepdims:
        out = cupy.expand_dims(out, axis) if axis is not None else out.reshape((1,) * a.ndim)
    return out.astype(np.int64, copy=False)


def argmax(a: cupy.ndarray, axis: Any, keepdims: bool) -> cupy.ndarray:
    return _arg_reduce(cupy.argmax, a, axis, keepdims)


def argmin(a: cupy.ndarray, axis: Any, keepdims: bool) -> cupy.ndarray:
    return _arg_reduce(cupy.argmin, a, axis, keepdims)


def any(a: cupy.ndarray, axis: Any, keepdims: bool) -> cupy.ndarray:
    return cupy.any(a, axis=axis, keepdims=keepdims)


def all(a: cupy.ndarray, axis: Any, keepdims: bool) -> cupy.ndarray:
    return cupy.all(a, axis=axis, keepdims=keepdims)


def cumsum(a: cupy.ndarray, axis: int, dt: np.dtype) -> cupy.ndarray:
    return cupy.cumsum(_acc(a), axis=axis).astype(dt, copy=False)


def cumprod(a: cupy.ndarray, axis: int, dt: np.dtype) -> cupy.ndarray:
    return cupy.cumprod(_acc(a), axis=axis).astype(dt, copy=False)


def _last_axis(kernel: Any, a: cupy.ndarray, axis: int) -> cupy.ndarray:
    """Run a row kernel over `axis`, moving it last (and back) when it is not already."""
    if a.ndim == 0:
        return kernel(a.reshape(1)).reshape(())
    axis = axis % a.ndim
    if axis == a.ndim - 1:
        return kernel(cupy.ascontiguousarray(a))
    moved = cupy.ascontiguousarray(cupy.moveaxis(a, axis, -1))
    return cupy.ascontiguousarray(cupy.moveaxis(kernel(moved), -1, axis))


def softmax(a: cupy.ndarray, axis: int) -> cupy.ndarray:
    if not a.size:
        return a.copy()
    if _kernel_ok(a):
        return _last_axis(lambda x: K.softmax(x, log=False), a, axis)
    out = a - cupy.amax(a, axis=axis, keepdims=True)
    cupy.exp(out, out=out)
    out /= cupy.sum(out, axis=axis, keepdims=True)
    return out


def log_softmax(a: cupy.ndarray, axis: int) -> cupy.ndarray:
    if not a.size:
        return a.copy()
    if _kernel_ok(a):
        return _last_axis(lambda x: K.softmax(x, log=True), a, axis)
    out = a - cupy.amax(a, axis=axis, keepdims=True)
    out -= cupy.log(cupy.sum(cupy.exp(out), axis=axis, keepdims=True))
    return out


def attention(q: Any, k: Any, v: Any, mask: Any, is_bool: bool, safe: bool, scale: float) -> None:
    """No fused attention kernel on CUDA yet: None sends the caller to matmul, masked_softmax (fused) and matmul."""
    return None


def masked_softmax(scores: cupy.ndarray, mask: Any, is_bool: bool, safe: bool) -> cupy.ndarray:
    """Attention's softmax over the last axis of `scores` (..., L, S), fused with its mask in one kernel: a bool
    mask keeps the True positions, a float mask is added; with `safe`, rows with no key left give zeros."""
    if not _kernel_ok(scores) or scores.ndim < 2 or not scores.size:
        return _host_style_masked_softmax(scores, mask, is_bool, safe)
    shape = scores.shape
    s4 = _as_4d(cupy.ascontiguousarray(scores), shape)  # (B, H, L, S)
    m4 = None if mask is None else _as_4d(asarray(mask), shape)
    return K.scaled_masked_softmax(s4, 1.0, m4, causal=False, safe=safe).reshape(shape)


def _as_4d(x: cupy.ndarray, shape: tuple[int, ...]) -> cupy.ndarray:
    """`x` (broadcastable to `shape`) as an array broadcastable to the 4-d (B, H, L, S) form of `shape`.

    Broadcasting aligns trailing dims, so leading 1s suffice up to 4 dims; more leading dims are folded into B
    (which materialises a broadcast mask: rare, and correct)."""
    if len(shape) <= 4:
        return x.reshape((1,) * (4 - x.ndim) + x.shape)
    return cupy.ascontiguousarray(cupy.broadcast_to(x, shape)).reshape(-1, *shape[-3:])


def _host_style_masked_softmax(scores: Any, mask: Any, is_bool: bool, safe: bool) -> cupy.ndarray:
    """The composed form (ops_cpu's), for dtypes and shapes the fused kernel does not take."""
    if mask is None:
        return softmax(scores, -1)
    if is_bool:
        scores = cupy.where(mask, scores, full((), -np.inf, scores.dtype))
        dead = cupy.logical_not(cupy.any(mask, -1, keepdims=True)) if safe else None
    else:
        scores = scores + mask
        dead = cupy.all(mask == -np.inf, -1, keepdims=True) if safe else None
    if dead is None or not bool(dead.any()):
        return softmax(scores, -1)
    zero = cupy.zeros((), scores.dtype)
    return cupy.where(dead, zero, softmax(cupy.where(dead, zero, scores), -1))


# ---- matrix products ------------------------------------------------------------------------------
_TF32_TENSOR_OP_MATH, _DEFAULT_MATH = 3, 0  # cublasMath_t values
_tf32_mode: bool | None = None


def _float32_gemm_mode(tf32: bool) -> None:
    """Strict FP32 or TF32 tensor cores for float32 GEMMs (PyTorch's allow_tf32 flags). CuPy's 2-d products read
    its per-dtype compute type; its batched ones (cublas*gemmBatched) the cuBLAS handle's math mode: set both."""
    global _tf32_mode
    if tf32 is not _tf32_mode:
        _linalg.set_compute_type(_F32, _linalg.COMPUTE_TYPE_TF32 if tf32 else _linalg.COMPUTE_TYPE_DEFAULT)
        _tf32_mode = tf32
    from cupy_backends.cuda.libs import cublas

    cublas.setMathMode(cupy.cuda.device.get_cublas_handle(), _TF32_TENSOR_OP_MATH if tf32 else _DEFAULT_MATH)


def gemm(a: cupy.ndarray, b: cupy.ndarray, tf32: bool | None = None, out: cupy.ndarray | None = None) -> Any:
    """a @ b on cuBLAS; float32 in strict FP32 unless `tf32` (default: serve.backends.cuda.matmul.allow_tf32).
    float16/bfloat16 stay in half with float32 accumulation (CuPy uses CUBLAS_COMPUTE_32F for both)."""
    if a.dtype == _F32:
        _float32_gemm_mode(flags.matmul_allow_tf32 if tf32 is None else tf32)
    if out is not None:
        return cupy.matmul(a, b, out=out)
    return cupy.matmul(a, b).astype(a.dtype, copy=False)  # (a no-op: CuPy keeps half products in half)


def matmul(a: cupy.ndarray, b: cupy.ndarray) -> cupy.ndarray:
    return gemm(a, b)


def einsum(subscripts: str, *operands: cupy.ndarray) -> cupy.ndarray:
    dt = operands[0].dtype
    if dt.num in _HALF_NUMS:  # CuPy's einsum may not take bfloat16: float32, as ops_cpu does
        operands = tuple(o.astype(np.float32) for o in operands)
        _float32_gemm_mode(flags.matmul_allow_tf32)
        return cupy.einsum(subscripts, *operands).astype(dt)
    if dt == _F32:
        _float32_gemm_mode(flags.matmul_allow_tf32)
    return cupy.einsum(subscripts, *operands)


# ---- movement and indexing ------------------------------------------------------------------------
reshape = cupy.reshape
moveaxis = cupy.moveaxis
transpose = cupy.transpose
broadcast_to = cupy.broadcast_to
flip = cupy.flip
roll = cupy.roll
tril = cupy.tril
triu = cupy.triu
take_along_axis = cupy.take_along_axis
nonzero = cupy.nonzero
strides = _host.strides  # array attributes only: the CPU backend's own
is_contiguous = _host.is_contiguous


def concatenate(arrays: Any, axis: int | None = 0) -> cupy.ndarray:
    return cupy.concatenate([asarray(a) for a in arrays], axis=axis)


def stack(arrays: Any, axis: int = 0) -> cupy.ndarray:
    return cupy.stack([asarray(a) for a in arrays], axis=axis)


def take(a: cupy.ndarray, indices: Any, axis: int | None = None) -> cupy.ndarray:
    idx = asarray(indices)
    if axis == 0 and a.ndim == 2 and idx.dtype.kind == "i" and _kernel_ok(a) and idx.size:
        return K.embedding(a, idx)  # an embedding lookup: one gather kernel, rows checked on the device
    return cupy.take(a, idx, axis=axis)


def pad(a: cupy.ndarray, pad_width: Any, constant_values: Any = 0) -> cupy.ndarray:
    """Constant padding with numpy's per-axis ((before, after), ...) widths (all non-negative)."""
    width = [(int(b), int(e)) for b, e in pad_width]
    shape = tuple(n + b + e for n, (b, e) in zip(a.shape, width))
    out = full(shape, constant_values, a.dtype)
    out[tuple(slice(b, b + n) for n, (b, _) in zip(a.shape, width))] = a
    return out


def view(a: cupy.ndarray, shape: tuple) -> cupy.ndarray | None:
    """`a` reshaped without copying, or None when its strides do not allow that."""
    out = a.view()
    try:
        out.shape = shape
    except (AttributeError, ValueError):  # numpy says AttributeError; be lenient about CuPy's wording
        return None
    return out


def index_add(target: cupy.ndarray, index: Any, values: Any) -> None:
    """target[index] += values, accumulating repeated indices (the backward of indexing)."""
    if isinstance(index, tuple):
        index = tuple(asarray(i) if isinstance(i, (np.ndarray, list)) else i for i in index)
    elif isinstance(index, (np.ndarray, list)):
        index = asarray(index)
    values = asarray(values)
    if target.dtype.num in _HALF_NUMS:  # atomic adds on half storage are not available for every dtype
        acc = target.astype(np.float32)
        cupyx.scatter_add(acc, index, values.astype(np.float32))
        target[...] = acc.astype(target.dtype)
        return
    cupyx.scatter_add(target, index, values)


def scatter_add(target: cupy.ndarray, axis: int, index: cupy.ndarray, src: cupy.ndarray) -> None:
    """target[..., index[i], ...] += src[i] along `axis` (the backward of gather)."""
    grid: list[Any] = list(cupy.indices(index.shape, sparse=True))
    grid[axis] = asarray(index)
    index_add(target, tuple(grid), src)


def sort(a: cupy.ndarray, axis: int, descending: bool) -> tuple[cupy.ndarray, cupy.ndarray]:
    """Stable sort along `axis`; NaN sorts as the largest value, like PyTorch (CuPy's argsort is a stable radix
    sort that orders NaN last, as numpy does)."""
    x = _acc(a)
    if descending:
        n = a.shape[axis]
        idx = (n - 1) - cupy.flip(cupy.argsort(cupy.flip(x, axis), axis=axis), axis)
    else:
        idx = cupy.argsort(x, axis=axis)
    return cupy.take_along_axis(a, idx, axis), idx


def topk(a: cupy.ndarray, k: int, axis: int, largest: bool) -> tuple[cupy.ndarray, cupy.ndarray]:
    vals, idx = sort(a, axis, largest)
    keep = cupy.arange(k)
    return cupy.take(vals, keep, axis=axis), cupy.take(idx, keep, axis=axis)


# ---- the nn primitives, one file per family (each lists its names in __all__) -------------------------
from serve.backend.cuda_conv import *  # noqa: E402, F403
from serve.backend.cuda_nn import *  # noqa: E402, F403
