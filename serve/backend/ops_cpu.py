"""The CPU backend: serve's primitive set implemented with numpy.

Everything device-independent reaches arrays only through a backend module like this one, so the CUDA
backend (CuPy) can provide the same names. Half-precision inputs are accumulated in float32 (sums,
matrix products, softmax), as PyTorch does on CPU.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import ml_dtypes
import numpy as np

from serve.backend import cpu_attention, cpu_blas, cpu_threads

# PyTorch computes 1/0, log(-1) and overflow silently (inf, nan); numpy warns. Silence numpy's floating-point
# RuntimeWarnings raised from serve's own modules only: an np.errstate block per op would cost more than the op.
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"serve(\.|$)")

ndarray = np.ndarray
_HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
_HALF_NUMS = frozenset(d.num for d in _HALF)

# ---- creation and conversion -----------------------------------------------------------------------
asarray = np.asarray
array = np.array
empty = np.empty
zeros = np.zeros
ones = np.ones
full = np.full
eye = np.eye
ascontiguousarray = np.ascontiguousarray
shares_memory = np.shares_memory


_NO_DEVICE = contextlib.nullcontext()


def on_device(index: int | None) -> contextlib.nullcontext:
    """The CUDA backend makes device `index` current for a block; the CPU has one device: nothing to do."""
    return _NO_DEVICE


def to_numpy(a: np.ndarray) -> np.ndarray:
    return a


def from_numpy(a: np.ndarray) -> np.ndarray:
    return a


def astype(a: np.ndarray, dt: np.dtype) -> np.ndarray:
    return a.astype(dt)


def arange(start: float, end: float, step: float, dt: np.dtype) -> np.ndarray:
    # computed in float64 then cast, so float32 results match PyTorch's start + i * step
    n = max(int(np.ceil((end - start) / step)), 0)
    if dt.kind in "iub":
        return (start + step * np.arange(n, dtype=np.int64)).astype(dt)
    return (start + step * np.arange(n, dtype=np.float64)).astype(dt)


def linspace(start: float, end: float, steps: int, dt: np.dtype) -> np.ndarray:
    # PyTorch fills the first half from start and the second half from end, so both ends are exact
    if steps == 1:
        return np.full((1,), start, dtype=dt)
    step = (end - start) / (steps - 1)
    i = np.arange(steps, dtype=np.float64)
    half = steps // 2
    out = np.where(i < half, start + step * i, end - step * (steps - 1 - i))
    return out.astype(dt)


# ---- random ---------------------------------------------------------------------------------------
def generator(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def uniform(gen: np.random.Generator, shape: tuple, dt: np.dtype, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    if dt == np.float32:
        out = gen.random(shape, dtype=np.float32)
        return out if (low, high) == (0.0, 1.0) else (out * np.float32(high - low) + np.float32(low))
    return (gen.random(shape) * (high - low) + low).astype(dt)


def normal(gen: np.random.Generator, shape: tuple, dt: np.dtype, mean: Any = 0.0, std: Any = 1.0) -> np.ndarray:
    if dt == np.float32 and isinstance(mean, float) and isinstance(std, float):
        out = gen.standard_normal(shape, dtype=np.float32)
        return out if (mean, std) == (0.0, 1.0) else out * np.float32(std) + np.float32(mean)
    return (gen.standard_normal(shape) * std + mean).astype(dt)


def integers(gen: np.random.Generator, low: int, high: int, shape: tuple, dt: np.dtype) -> np.ndarray:
    return gen.integers(low, high, size=shape, dtype=np.int64).astype(dt, copy=False)


def permutation(gen: np.random.Generator, n: int, dt: np.dtype) -> np.ndarray:
    return gen.permutation(n).astype(dt, copy=False)


def bernoulli(gen: np.random.Generator, p: np.ndarray, dt: np.dtype) -> np.ndarray:
    return (gen.random(p.shape) < p).astype(dt)


# ---- elementwise ----------------------------------------------------------------------------------
neg = np.negative
abs = np.absolute
exp = np.exp
log = np.log
log1p = np.log1p
expm1 = np.expm1
sqrt = np.sqrt
sin = np.sin
cos = np.cos
tan = np.tan
tanh = np.tanh
sign = np.sign
floor = np.floor
ceil = np.ceil
trunc = np.trunc
round = np.round
reciprocal = np.reciprocal
isnan = np.isnan
isinf = np.isinf
isfinite = np.isfinite
logical_not = np.logical_not
bitwise_not = np.invert

add = np.add
sub = np.subtract
mul = np.multiply
div = np.true_divide
floor_divide = np.floor_divide
remainder = np.remainder
power = np.power
maximum = np.maximum
minimum = np.minimum
fmax = np.fmax
eq = np.equal
ne = np.not_equal
lt = np.less
le = np.less_equal
gt = np.greater
ge = np.greater_equal
logical_and = np.logical_and
logical_or = np.logical_or
logical_xor = np.logical_xor
bitwise_and = np.bitwise_and
bitwise_or = np.bitwise_or
bitwise_xor = np.bitwise_xor
where = np.where
clip = np.clip
copyto = np.copyto
array2string = np.array2string


def rsqrt(a: np.ndarray) -> np.ndarray:
    out = np.sqrt(a)
    return np.divide(1, out, out=out) if isinstance(out, np.ndarray) else 1 / out


def sigmoid(a: np.ndarray) -> np.ndarray:
    # 1 / (1 + exp(-x)) overflows harmlessly to 0 for very negative x
    with np.errstate(over="ignore"):
        out = np.asarray(np.exp(-a))  # asarray: numpy gives a scalar, not an array, for a 0-d input
    out += 1
    return np.reciprocal(out, out=out)


def relu(a: np.ndarray) -> np.ndarray:
    return np.maximum(a, 0)  # a Python 0 keeps a's dtype (NEP 50)


# Cephes erf/erfc rational approximations (public domain, S. Moshier), evaluated in float64.
_ERF_T = (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3,
          7.00332514112805075473e3, 5.55923013010394962768e4)  # fmt: skip
_ERF_U = (1.0, 3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3,
          2.26290000613890934246e4, 4.92673942608635921086e4)  # fmt: skip
_ERFC_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
           4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
           9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2)  # fmt: skip
_ERFC_Q = (1.0, 1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
           9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
           1.65666309194161350182e3, 5.57535340817727675546e2)  # fmt: skip
_ERFC_R = (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0,
           6.16021097993053585195e0, 7.40974269950448939160e0, 2.97886665372100240670e0)  # fmt: skip
_ERFC_S = (1.0, 2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1,
           1.70814450747565897222e1, 9.60896809063285878198e0, 3.36907645100081516050e0)  # fmt: skip


def _polyval(coefs: tuple, x: np.ndarray) -> np.ndarray:
    out = np.full_like(x, coefs[0])
    for c in coefs[1:]:
        out *= x
        out += c
    return out


def erf(a: np.ndarray) -> np.ndarray:
    x = np.asarray(a, dtype=np.float64)
    ax = np.abs(x)
    small = ax <= 1.0
    out = np.empty_like(x)
    xs = x[small]
    z = xs * xs
    out[small] = xs * _polyval(_ERF_T, z) / _polyval(_ERF_U, z)
    big = ~small
    xb = np.minimum(ax[big], 27.0)  # erfc underflows to 0 past ~26.6
    mid = xb < 8.0
    p = np.where(mid, _polyval(_ERFC_P, xb), _polyval(_ERFC_R, xb))
    q = np.where(mid, _polyval(_ERFC_Q, xb), _polyval(_ERFC_S, xb))
    erfc = np.exp(-xb * xb) * p / q
    out[big] = np.copysign(1.0 - erfc, x[big])
    out[np.isnan(x)] = np.nan
    # bfloat16's numpy kind is "V", not "f": test membership too, or it would come back as float64
    return out.astype(a.dtype, copy=False) if a.dtype.kind == "f" or a.dtype in _HALF else out


# ---- reductions -----------------------------------------------------------------------------------
def _acc(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32) if a.dtype.num in _HALF_NUMS else a


def sum(a: np.ndarray, axis: Any, keepdims: bool, dt: np.dtype) -> np.ndarray:
    if a.dtype.num in _HALF_NUMS:
        return np.asarray(np.sum(a, axis=axis, keepdims=keepdims, dtype=np.float32).astype(dt))
    # positional arguments: numpy's keyword parsing costs as much as a small reduction
    return np.asarray(_add_reduce(a, axis, dt, None, keepdims))  # type: ignore[call-overload]


def prod(a: np.ndarray, axis: Any, keepdims: bool, dt: np.dtype) -> np.ndarray:
    return np.asarray(np.prod(_acc(a), axis=axis, keepdims=keepdims).astype(dt))


def amax(a: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    return np.asarray(np.max(a, axis=axis, keepdims=keepdims))


def amin(a: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    return np.asarray(np.min(a, axis=axis, keepdims=keepdims))


def argmax(a: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    return np.asarray(np.argmax(a, axis=axis, keepdims=keepdims))


def argmin(a: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    return np.asarray(np.argmin(a, axis=axis, keepdims=keepdims))


def any(a: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    return np.asarray(np.any(a, axis=axis, keepdims=keepdims))


def all(a: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    return np.asarray(np.all(a, axis=axis, keepdims=keepdims))


def cumsum(a: np.ndarray, axis: int, dt: np.dtype) -> np.ndarray:
    return np.cumsum(_acc(a), axis=axis).astype(dt, copy=False)


def cumprod(a: np.ndarray, axis: int, dt: np.dtype) -> np.ndarray:
    return np.cumprod(_acc(a), axis=axis).astype(dt, copy=False)


_max_reduce, _add_reduce = np.maximum.reduce, np.add.reduce


def _row_max(a: np.ndarray, axis: int) -> np.ndarray:
    # reductions called positionally: on small tensors numpy's keyword parsing costs as much as the math
    return _max_reduce(a, axis, None, None, True)  # type: ignore[call-overload]


def _row_sum(a: np.ndarray, axis: int) -> np.ndarray:
    return _add_reduce(a, axis, None, None, True)  # type: ignore[call-overload]


def softmax(a: np.ndarray, axis: int) -> np.ndarray:
    if not a.size:
        return a.copy()
    if a.dtype.num in _HALF_NUMS:
        return softmax(a.astype(np.float32), axis).astype(a.dtype)
    shift = _shift(a, axis)
    out = np.empty(a.shape, np.result_type(a, shift))
    if a.nbytes < cpu_threads.SPLIT_BYTES or axis % a.ndim != a.ndim - 1 or a.ndim < 2:
        _exp_normalize(a, shift, out, axis)
        return out
    # the lanes take rows of the last axis; the shift is chosen once for all, so the result is the same
    rows, cols = a.reshape(-1, a.shape[-1]), out.reshape(-1, a.shape[-1])
    shifts = shift.reshape(-1, 1) if np.ndim(shift) else np.broadcast_to(shift, (len(rows), 1))
    cpu_threads.parallel(lambda r0, r1: _exp_normalize(rows[r0:r1], shifts[r0:r1], cols[r0:r1], -1),
                         cpu_threads.spans(len(rows)))  # fmt: skip
    return out


def _exp_normalize(a: np.ndarray, shift: Any, out: np.ndarray, axis: int) -> None:
    """softmax's passes into `out`: exp(a - shift), divided by its sums along `axis`."""
    np.subtract(a, shift, out=out)
    np.exp(out, out=out)
    out /= _row_sum(out, axis)


# exp(x - max) is exact enough and cannot overflow or underflow a whole row when every value lies within this
# distance of the global max (exp(-80) ~ 1.8e-35 is still a normal float32)
_SAFE_SPREAD = 80.0


def _shift(a: np.ndarray, axis: int) -> Any:
    """What softmax subtracts before exp: the row max, or the global max when that is as safe.

    A global max/min is one contiguous pass (SIMD); a row max over a short last axis costs about 15x more.
    """
    if a.size >= 4096:
        hi, lo = _max_reduce(a, None), np.minimum.reduce(a, None)
        if hi - lo < _SAFE_SPREAD:
            return hi
    return _row_max(a, axis)


def log_softmax(a: np.ndarray, axis: int) -> np.ndarray:
    if not a.size:
        return a.copy()
    if a.dtype.num in _HALF_NUMS:
        return log_softmax(a.astype(np.float32), axis).astype(a.dtype)
    out = np.subtract(a, _shift(a, axis))
    out -= np.log(_row_sum(np.exp(out), axis))
    return out


def masked_softmax(scores: np.ndarray, mask: np.ndarray | None, is_bool: bool, safe: bool) -> np.ndarray:
    """Attention's softmax over the last axis of `scores` with an optional mask: a bool mask keeps its True
    positions, a float mask is added. With `safe`, rows with no key left give zeros (PyTorch's
    scaled_dot_product_attention), else NaN (a plain softmax). The CUDA backend fuses this into one kernel."""
    if mask is None:
        return softmax(scores, -1)
    # fills as 0-d arrays of the scores' dtype: with a Python float, numpy promotes bfloat16 to float64
    if is_bool:
        scores = np.where(mask, scores, np.asarray(-np.inf, scores.dtype))
        dead = np.logical_not(any(mask, -1, True)) if safe else None
    else:
        scores = scores + mask
        dead = all(mask == -np.inf, -1, True) if safe else None
    if dead is None or not dead.any():
        return softmax(scores, -1)
    # zero the scores of dead rows first, so the softmax never sees a row of -inf (NaN)
    zero = np.asarray(0, scores.dtype)
    return np.where(dead, zero, softmax(np.where(dead, zero, scores), -1))


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, is_bool: bool, safe: bool, scale: float
) -> np.ndarray | None:
    """softmax(q @ k^T * scale + mask) @ v in one fused kernel (serve.backend.cpu_attention), or None where it
    does not apply: the caller then runs matmul, masked_softmax and matmul. A bfloat16 plan's route
    (cpu_attention.ROUTE, set only while that plan runs) chooses the products' dtype."""
    route = cpu_attention.ROUTE.get()
    if route is not None:
        return route(q, k, v, mask, is_bool, safe, scale)
    return cpu_attention.attention(q, k, v, mask, is_bool, safe, scale)


# ---- matrix products ------------------------------------------------------------------------------
def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.num in _HALF_NUMS:
        return np.asarray(cpu_blas.matmul(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype))
    return np.asarray(cpu_blas.matmul(a, b))


def einsum(subscripts: str, *operands: np.ndarray) -> np.ndarray:
    dt = operands[0].dtype
    if dt.num in _HALF_NUMS:
        operands = tuple(o.astype(np.float32) for o in operands)
        return np.asarray(np.einsum(subscripts, *operands, optimize=True)).astype(dt)
    return np.asarray(np.einsum(subscripts, *operands, optimize=len(operands) > 2))


# ---- movement and indexing ------------------------------------------------------------------------
reshape = np.reshape
moveaxis = np.moveaxis
transpose = np.transpose
broadcast_to = np.broadcast_to
concatenate = np.concatenate
stack = np.stack
flip = np.flip
roll = np.roll
tril = np.tril
triu = np.triu
take = np.take
take_along_axis = np.take_along_axis
nonzero = np.nonzero
pad = np.pad


def view(a: np.ndarray, shape: tuple) -> np.ndarray | None:
    """`a` reshaped without copying, or None when its strides do not allow that."""
    out = a.view()
    try:
        out.shape = shape
    except AttributeError:
        return None
    return out


def strides(a: np.ndarray) -> tuple[int, ...]:
    """Strides in elements, as PyTorch reports them."""
    return tuple(s // a.itemsize for s in a.strides) if a.itemsize else (0,) * a.ndim


def is_contiguous(a: np.ndarray) -> bool:
    return bool(a.flags.c_contiguous)


def index_add(target: np.ndarray, index: Any, values: np.ndarray) -> None:
    """target[index] += values, accumulating repeated indices (the backward of indexing)."""
    np.add.at(target, index, values)


def scatter_add(target: np.ndarray, axis: int, index: np.ndarray, src: np.ndarray) -> None:
    """target[..., index[i], ...] += src[i] along `axis` (the backward of gather)."""
    grid: list[Any] = list(np.indices(index.shape, sparse=True))
    grid[axis] = index
    np.add.at(target, tuple(grid), src)


def sort(a: np.ndarray, axis: int, descending: bool) -> tuple[np.ndarray, np.ndarray]:
    """Stable sort along `axis`; NaN sorts as the largest value, like PyTorch."""
    keys = a.astype(np.float32) if a.dtype == _HALF[1] else a  # ml_dtypes' bfloat16 argsort misplaces NaN
    if descending:
        n = a.shape[axis]
        idx = (n - 1) - np.flip(np.argsort(np.flip(keys, axis), axis=axis, kind="stable"), axis)
    else:
        idx = np.argsort(keys, axis=axis, kind="stable")
    return np.take_along_axis(a, idx, axis), idx


def topk(a: np.ndarray, k: int, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    n = a.shape[axis]
    if 0 < k < n // 4 and a.dtype.kind == "f" and not np.isnan(a).any():
        part = np.argpartition(-a if largest else a, k - 1, axis=axis)
        cand = np.take(part, np.arange(k), axis=axis)
        vals = np.take_along_axis(a, cand, axis)
        order = np.argsort(-vals if largest else vals, axis=axis, kind="stable")
        idx = np.take_along_axis(cand, order, axis)
        return np.take_along_axis(a, idx, axis), idx
    vals, idx = sort(a, axis, largest)
    return np.take(vals, np.arange(k), axis=axis), np.take(idx, np.arange(k), axis=axis)


# ---- the nn primitives, one file per family (each lists its names in __all__) -------------------------
from serve.backend import cpu_memory  # noqa: E402
from serve.backend.cpu_conv import *  # noqa: E402, F403
from serve.backend.cpu_nn import *  # noqa: E402, F403
from serve.backend.cpu_pool import *  # noqa: E402, F403
from serve.backend.cpu_resample import *  # noqa: E402, F403

cpu_memory.keep_freed_buffers()  # activations reuse mapped heap memory instead of page-faulting fresh mmaps
cpu_threads.hold_blas()  # serve's lanes split the work; numpy's BLAS runs one thread under them
