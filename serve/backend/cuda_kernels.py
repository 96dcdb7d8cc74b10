"""serve's own CUDA kernels, one Python wrapper each, on CuPy arrays (imported only by the CUDA backend).

Each kernel family (`kernels/<family>.cu` after `kernels/common.cuh`, see `kernel_sources`) is compiled by NVRTC
through `cupy.RawModule` once per storage dtype (float32, float16, bfloat16: `-DSERVE_T=...`) and cached here;
CuPy also caches the binary on disk. Kernels compute in float32 whatever the storage type.

Every wrapper takes CuPy arrays (made C-contiguous when they are not), returns a new C-contiguous array of the
input's dtype unless it says otherwise (or writes `out=`), launches on the current device and current stream,
and raises ValueError naming an unsupported dtype or shape. Scalars are passed as numpy scalars of exactly the
kernel's C types (CuPy would pass a Python int as a long long and a float as a double).
"""

from __future__ import annotations

from typing import Any

import cupy
import ml_dtypes
import numpy as np

from serve.backend import kernel_sources

__all__ = [
    "activation", "adaptive_avg_pool2d", "avg_pool2d", "bias_activation", "embedding", "im2col", "layer_norm",
    "max_pool2d", "row_moments", "scaled_masked_softmax", "softmax", "standardize_rows",
]  # fmt: skip

_DTYPE_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16",
                np.dtype(ml_dtypes.bfloat16): "bfloat16"}  # fmt: skip
_FLOAT32 = np.dtype(np.float32)
ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
_WARP_ROW_MAX = 1024  # rows up to this long get a warp each; longer ones a block
_ROWS_PER_BLOCK = 8  # warps (rows) per block of the warp-per-row kernels
_BLOCK = 256  # threads per block of the elementwise / per-output kernels
_INT_MAX = 0x7FFFFFFF

# every kernel a wrapper launches, by family: the CI test (no cupy) checks each is defined in its family's source
KERNELS = {
    "activation": ("bias_activation",),
    "softmax": ("softmax_rows_warp", "softmax_rows_block", "masked_softmax_warp", "masked_softmax_block"),
    "norm": ("layer_norm_warp", "layer_norm_block", "row_moments_warp", "row_moments_block"),
    "embedding": ("embedding_i32", "embedding_i64"),
    "pool": ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"),
    "im2col": ("im2col",),
}
_modules: dict[tuple[str, str], Any] = {}
_functions: dict[tuple[str, str, str], Any] = {}
_sm_counts: dict[int, int] = {}

Pair = tuple[int, int]


# ---- compilation and launch helpers ----------------------------------------------------------------------
def _dtype_name(dt: Any, what: str) -> str:
    name = _DTYPE_NAMES.get(np.dtype(dt))
    if name is None:
        raise ValueError(f"{what}: unsupported dtype {np.dtype(dt)}; expected float32, float16 or bfloat16")
    return name


def _module(family: str, dtype: Any) -> Any:
    """The compiled module of `family` for storage `dtype` (compiled on first use, then cached)."""
    name = _dtype_name(dtype, family)
    mod = _modules.get((family, name))
    if mod is None:
        src, opts = kernel_sources.source(family), kernel_sources.options(name)
        mod = _modules[(family, name)] = cupy.RawModule(code=src, options=opts)
    return mod


def _kernel(family: str, kernel: str, dtype: Any) -> Any:
    key = (family, kernel, _dtype_name(dtype, family))
    fn = _functions.get(key)
    if fn is None:
        if kernel not in KERNELS[family]:
            raise RuntimeError(f"kernel {kernel!r} is not listed in cuda_kernels.KERNELS[{family!r}]")
        fn = _functions[key] = _module(family, dtype).get_function(kernel)
    return fn


def _sm_count() -> int:
    dev = cupy.cuda.runtime.getDevice()
    count = _sm_counts.get(dev)
    if count is None:
        attr = cupy.cuda.runtime.cudaDevAttrMultiProcessorCount
        count = _sm_counts[dev] = int(cupy.cuda.runtime.deviceGetAttribute(attr, dev))
    return count


def _grid(work: int, per_block: int) -> int:
    """Blocks for `work` items at `per_block` per block, capped for the grid-stride loops (~4 waves of full SMs)."""
    return max(1, min(-(-work // per_block), _sm_count() * 32))


def _row_grid(rows: int, per_block: int) -> int:
    return max(1, min(-(-rows // per_block), _INT_MAX))


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _div(d: int) -> tuple[np.uint32, np.uint32, np.uint32]:
    """A divisor and its magic numbers as the kernel's three `unsigned int` arguments."""
    return tuple(np.uint32(v) for v in kernel_sources.divider(d))  # type: ignore[return-value]


def _i32(v: int) -> np.int32:
    return np.int32(v)


def _i64(v: int) -> np.int64:
    return np.int64(v)


def _contiguous(a: Any) -> Any:
    """a as a C-contiguous array of the same shape (numpy's ascontiguousarray turns 0-d into 1-d)."""
    out = cupy.ascontiguousarray(a)
    return out if out.shape == a.shape else out.reshape(a.shape)


def _float_input(x: Any, what: str) -> Any:
    _dtype_name(x.dtype, what)
    return _contiguous(x)


def _vec_ok(n: int, *arrays: Any) -> int:
    """1 when rows of n elements allow 16-byte accesses on every array (n a multiple of 16 bytes, aligned bases)."""
    itemsize = arrays[0].dtype.itemsize
    return int((n * itemsize) % 16 == 0 and all(a.data.ptr % 16 == 0 for a in arrays))


def _param(p: Any, dt: np.dtype, size: int, what: str) -> tuple[Any, np.int32]:
    """An optional per-channel parameter as (array or None, kind): 0 absent, 1 float32, 2 the storage dtype."""
    if p is None:
        return None, _i32(0)
    p = _contiguous(p).reshape(-1)
    if p.size != size:
        raise ValueError(f"{what} has {p.size} elements, expected {size}")
    if p.dtype == dt:
        return p, _i32(2)
    return p.astype(np.float32, copy=False), _i32(1)


def _out_like(x: Any, out: Any, what: str) -> Any:
    if out is None:
        return cupy.empty_like(x)
    if out.shape != x.shape or out.dtype != x.dtype or not out.flags.c_contiguous:
        raise ValueError(f"{what}: out must be a C-contiguous {x.dtype} array of shape {x.shape}, "
                         f"got {out.dtype} {out.shape}")  # fmt: skip
    return out


def _rows(x: Any, n: int, what: str) -> int:
    if n <= 0 or x.size % n:
        raise ValueError(f"{what}: {x.size} elements do not split into rows of {n}")
    return x.size // n


def _check_act(act: str) -> np.int32:
    code = ACTIVATIONS.get(act)
    if code is None:
        raise ValueError(f"unknown activation {act!r}; expected one of {', '.join(ACTIVATIONS)}")
    return _i32(code)


# ---- activations -----------------------------------------------------------------------------------------
def bias_activation(y: Any, scale: Any, shift: Any, act: str, inner: int, out: Any = None) -> Any:
    """act(y * scale[c] + shift[c]) with y viewed as (outer, C, inner), C = len(shift or scale).

    Fuses linear's bias and activation (inner = 1), a convolution's bias (+ ReLU) and inference batch norm with a
    following ReLU (inner = H * W). scale / shift: C elements of float32 or y's dtype (others are cast to float32),
    or None (1 / 0). act: "none", "relu", "gelu" (erf), "gelu_tanh" or "silu". out may be y itself (in place);
    it must then be C-contiguous. Returns out (a new array when out is None), y's dtype and shape.
    """
    y = _float_input(y, "bias_activation")
    code = _check_act(act)
    c = next((p.size for p in (shift, scale) if p is not None), 1)
    if inner <= 0 or y.size % (c * inner):
        raise ValueError(f"bias_activation: shape {y.shape} is not (outer, {c}, {inner})")
    scale, scale_kind = _param(scale, y.dtype, c, "bias_activation: scale")
    shift, shift_kind = _param(shift, y.dtype, c, "bias_activation: shift")
    out = _out_like(y, out, "bias_activation")
    if y.size == 0:
        return out
    inner_div, c_div = _div(min(inner, _INT_MAX)), _div(min(c, _INT_MAX))
    kernel = _kernel("activation", "bias_activation", y.dtype)
    args = (y, out, scale, shift, scale_kind, shift_kind, _i64(y.size), *inner_div, *c_div, code)
    kernel((_grid(y.size, _BLOCK),), (_BLOCK,), args)
    return out


def activation(x: Any, act: str) -> Any:
    """act(x) elementwise, any shape (bias_activation without scale or shift)."""
    return bias_activation(x, None, None, act, 1)


# ---- softmax ---------------------------------------------------------------------------------------------
def _row_block(n: int, per_thread: int) -> int:
    """Threads per block for a block-per-row kernel on rows of n: a power of two in 128..1024."""
    return min(1024, max(128, _pow2(-(-n // per_thread))))


def softmax(x: Any, log: bool = False) -> Any:
    """softmax (or log_softmax) over the last axis; x any float dtype above, returned in x's dtype and shape.

    One kernel: online max and sum in one read of each row, then one pass that writes (the row re-read mostly from
    L2). A row of -inf gives NaN, as PyTorch's softmax.
    """
    x = _float_input(x, "softmax")
    y = cupy.empty_like(x)
    if x.size == 0:
        return y
    n = x.shape[-1] if x.ndim else 1
    if n > _INT_MAX:
        raise ValueError(f"softmax: rows of {n} elements are too long (at most {_INT_MAX})")
    rows, vec = x.size // n, _vec_ok(n, x, y)
    args = (x, y, _i64(rows), _i32(n), _i32(bool(log)), _i32(vec))
    if n <= _WARP_ROW_MAX:
        threads = 32 * _ROWS_PER_BLOCK
        _kernel("softmax", "softmax_rows_warp", x.dtype)((_row_grid(rows, _ROWS_PER_BLOCK),), (threads,), args)
    else:
        threads = _row_block(n, 16 // x.dtype.itemsize if vec else 4)
        _kernel("softmax", "softmax_rows_block", x.dtype)((_row_grid(rows, 1),), (threads,), args)
    return y


def _mask_args(mask: Any, scores: Any) -> tuple[Any, np.int32, tuple[np.int64, ...]]:
    """(array or None, kind, 4 element strides) of an attention mask broadcast to scores' (B, H, Lq, Lk)."""
    if mask is None:
        return None, _i32(0), (_i64(0),) * 4
    if mask.dtype == np.bool_:
        kind = 3
    elif mask.dtype.kind == "f" or mask.dtype in _DTYPE_NAMES:
        kind = 2 if mask.dtype == scores.dtype else 1
        if kind == 1 and mask.dtype != _FLOAT32:
            mask = mask.astype(np.float32)
    else:
        raise ValueError(f"scaled_masked_softmax: mask dtype {mask.dtype} is neither bool nor floating point")
    if mask.ndim > 4:
        raise ValueError(f"scaled_masked_softmax: mask of shape {mask.shape} has more than 4 dims")
    mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
    try:
        view = cupy.broadcast_to(mask, scores.shape)
    except ValueError:
        raise ValueError(f"scaled_masked_softmax: mask of shape {mask.shape} does not broadcast to "
                         f"scores {scores.shape}") from None  # fmt: skip
    strides = tuple(_i64(s // view.itemsize) for s in view.strides)
    return view, _i32(kind), strides


def scaled_masked_softmax(scores: Any, scale: float, mask: Any = None, causal: bool = False,
                          safe: bool = False) -> Any:  # fmt: skip
    """softmax(scores * scale + mask) over keys, for attention scores (B, H, Lq, Lk); returns scores' dtype.

    mask: None, a float array added to the scaled scores, or a bool array (True = keep), broadcastable to
    (B, H, Lq, Lk) (never materialized: read through its strides). causal masks keys k > q. safe=True gives 0 for
    a row with no unmasked key (PyTorch's scaled_dot_product_attention); otherwise such a row is NaN.
    """
    scores = _float_input(scores, "scaled_masked_softmax")
    if scores.ndim != 4:
        raise ValueError(f"scaled_masked_softmax: scores must be (B, H, Lq, Lk), got shape {scores.shape}")
    b, h, lq, lk = scores.shape
    y = cupy.empty_like(scores)
    if scores.size == 0:
        return y
    if lk > _INT_MAX:
        raise ValueError(f"scaled_masked_softmax: {lk} keys are too many (at most {_INT_MAX})")
    view, kind, strides = _mask_args(mask, scores)
    rows = b * h * lq
    args = (scores, y, _i64(rows), _i32(lk), np.float32(scale), view, kind, _i64(h), _i64(lq), *strides,
            _i32(bool(causal)), _i32(bool(safe)))  # fmt: skip
    if lk <= _WARP_ROW_MAX:
        kernel = _kernel("softmax", "masked_softmax_warp", scores.dtype)
        kernel((_row_grid(rows, _ROWS_PER_BLOCK),), (32 * _ROWS_PER_BLOCK,), args)
    else:
        kernel = _kernel("softmax", "masked_softmax_block", scores.dtype)
        kernel((_row_grid(rows, 1),), (_row_block(lk, 4),), args)
    return y


# ---- normalization ---------------------------------------------------------------------------------------
def _norm_launch(name: str, x: Any, n: int, args: tuple, vec: int) -> None:
    rows = x.size // n
    if n <= _WARP_ROW_MAX:
        kernel = _kernel("norm", f"{name}_warp", x.dtype)
        kernel((_row_grid(rows, _ROWS_PER_BLOCK),), (32 * _ROWS_PER_BLOCK,), args)
    else:
        kernel = _kernel("norm", f"{name}_block", x.dtype)
        kernel((_row_grid(rows, 1),), (_row_block(n, 16 // x.dtype.itemsize if vec else 4),), args)


def layer_norm(x: Any, weight: Any, bias: Any, n: int, eps: float) -> Any:
    """Normalize each row of the n trailing elements (x.size // n rows), then * weight + bias (each n elements of
    float32 or x's dtype, or None). Mean and population variance in float32, robust to a large mean."""
    x = _float_input(x, "layer_norm")
    rows = _rows(x, n, "layer_norm")
    weight, wk = _param(weight, x.dtype, n, "layer_norm: weight")
    bias, bk = _param(bias, x.dtype, n, "layer_norm: bias")
    y = cupy.empty_like(x)
    if x.size == 0:
        return y
    vec = _vec_ok(n, x, y)
    _norm_launch("layer_norm", x, n, (x, y, weight, wk, bias, bk, _i64(rows), _i64(n), np.float32(eps), _i32(vec)), vec)
    return y


def standardize_rows(x: Any, n: int, eps: float) -> Any:
    """(x - mean) / sqrt(var + eps) per row of n elements (population variance): GroupNorm's and InstanceNorm's
    core (their affine is a bias_activation over channels)."""
    return layer_norm(x, None, None, n, eps)


def row_moments(x: Any, n: int) -> tuple[Any, Any]:
    """(mean, var) of each row of n elements: float32 arrays of x.size // n, population variance."""
    x = _float_input(x, "row_moments")
    rows = _rows(x, n, "row_moments")
    mean, var = cupy.empty(rows, np.float32), cupy.empty(rows, np.float32)
    if x.size == 0:
        return mean, var
    vec = _vec_ok(n, x)
    _norm_launch("row_moments", x, n, (x, mean, var, _i64(rows), _i64(n), _i32(vec)), vec)
    return mean, var


# ---- embedding -------------------------------------------------------------------------------------------
def embedding(weight: Any, ids: Any) -> Any:
    """weight[ids]: weight (V, D), ids int32 / int64 of any shape -> ids.shape + (D,) in weight's dtype.

    An id outside [0, V) raises IndexError naming it (one small min / max reduction, read before the launch).
    """
    weight = _float_input(weight, "embedding")
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be (num_embeddings, dim), got shape {weight.shape}")
    if ids.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise ValueError(f"embedding: ids dtype {ids.dtype} is not int32 or int64")
    ids = _contiguous(ids)
    v, d = weight.shape
    out = cupy.empty(ids.shape + (d,), weight.dtype)
    if ids.size == 0 or d == 0:
        return out
    lo, hi = (int(i) for i in cupy.stack((ids.min(), ids.max())).get())
    if lo < 0 or hi >= v:
        bad = lo if lo < 0 else hi
        raise IndexError(f"embedding: index {bad} is out of range for a table of {v} rows (valid 0..{v - 1})")
    vec = _vec_ok(d, weight, out)
    per_row = d // (16 // weight.dtype.itemsize) if vec else d
    tx = min(_BLOCK, max(32, _pow2(per_row)))
    ty = _BLOCK // tx
    name = "embedding_i32" if ids.dtype == np.int32 else "embedding_i64"
    args = (weight, ids, out, _i64(ids.size), _i64(v), _i64(d), _i32(vec))
    _kernel("embedding", name, weight.dtype)((_grid(ids.size, ty),), (tx, ty), args)
    return out


# ---- pooling and im2col ----------------------------------------------------------------------------------
def _nchw(x: Any, what: str) -> Any:
    x = _float_input(x, what)
    if x.ndim != 4:
        raise ValueError(f"{what}: expected an (N, C, H, W) array, got shape {x.shape}")
    if x.shape[2] * x.shape[3] > _INT_MAX:
        raise ValueError(f"{what}: planes of {x.shape[2]}x{x.shape[3]} are too large (at most 2**31-1 elements)")
    return x


def _top_left(padding: tuple[int, ...], what: str) -> Pair:
    """(top, left) of padding given as (ph, pw) or (top, bottom, left, right): the output size is given, so the
    bottom and right padding only matter through it."""
    if len(padding) == 2:
        return padding[0], padding[1]
    if len(padding) == 4:
        return padding[0], padding[2]
    raise ValueError(f"{what}: padding {padding} is neither (ph, pw) nor (top, bottom, left, right)")


def _positive(what: str, **pairs: tuple[int, ...]) -> None:
    for name, pair in pairs.items():
        if len(pair) != 2 or min(pair) < 1:
            raise ValueError(f"{what}: {name} must be two positive ints, got {pair}")


def _plane_args(out_hw: Pair) -> tuple:
    """The OW and OH divisors of the per-output pooling kernels."""
    return (*_div(max(out_hw[1], 1)), *_div(max(out_hw[0], 1)))


def max_pool2d(x: Any, kernel: Pair, stride: Pair, padding: tuple[int, ...], dilation: Pair, out_hw: Pair,
               with_indices: bool) -> tuple[Any, Any]:  # fmt: skip
    """Max over each window of x (N, C, H, W) -> (y (N, C, OH, OW), idx int64 or None).

    Padding never wins; a NaN in a window gives NaN; idx is the flat h * W + w in the input plane, as PyTorch's.
    padding: (ph, pw) or (top, bottom, left, right).
    """
    x = _nchw(x, "max_pool2d")
    _positive("max_pool2d", kernel=kernel, stride=stride, dilation=dilation)
    (ph, pw), (n, c, h, w) = _top_left(padding, "max_pool2d"), x.shape
    y = cupy.empty((n, c) + tuple(out_hw), x.dtype)
    idx = cupy.empty(y.shape, np.int64) if with_indices else None
    if y.size == 0:
        return y, idx
    args = (x, y, idx, _i64(y.size), *_plane_args(out_hw), _i32(h), _i32(w), _i32(kernel[0]), _i32(kernel[1]),
            _i32(stride[0]), _i32(stride[1]), _i32(ph), _i32(pw), _i32(dilation[0]), _i32(dilation[1]))  # fmt: skip
    _kernel("pool", "max_pool2d", x.dtype)((_grid(y.size, _BLOCK),), (_BLOCK,), args)
    return y, idx


def avg_pool2d(x: Any, kernel: Pair, stride: Pair, padding: tuple[int, ...], out_hw: Pair, count_include_pad: bool,
               divisor_override: int | None) -> Any:  # fmt: skip
    """Mean over each window of x (N, C, H, W) -> (N, C, OH, OW), with PyTorch's divisor: divisor_override if
    given, else the window size counting padding (count_include_pad) or not; a ceil_mode window stops at the
    padding's far edge. padding: (ph, pw) or (top, bottom, left, right)."""
    x = _nchw(x, "avg_pool2d")
    _positive("avg_pool2d", kernel=kernel, stride=stride)
    (ph, pw), (n, c, h, w) = _top_left(padding, "avg_pool2d"), x.shape
    y = cupy.empty((n, c) + tuple(out_hw), x.dtype)
    if y.size == 0:
        return y
    args = (x, y, _i64(y.size), *_plane_args(out_hw), _i32(h), _i32(w), _i32(kernel[0]), _i32(kernel[1]),
            _i32(stride[0]), _i32(stride[1]), _i32(ph), _i32(pw), _i32(bool(count_include_pad)),
            _i32(divisor_override or 0))  # fmt: skip
    _kernel("pool", "avg_pool2d", x.dtype)((_grid(y.size, _BLOCK),), (_BLOCK,), args)
    return y


def adaptive_avg_pool2d(x: Any, out_hw: Pair) -> Any:
    """PyTorch's adaptive average pooling of x (N, C, H, W) -> (N, C, OH, OW): output i averages inputs
    floor(i * H / OH) .. ceil((i + 1) * H / OH) - 1 (and the same along W)."""
    x = _nchw(x, "adaptive_avg_pool2d")
    n, c, h, w = x.shape
    if min(out_hw) < 0 or (min(out_hw) > 0 and min(h, w) == 0):
        raise ValueError(f"adaptive_avg_pool2d: cannot pool {h}x{w} planes to {out_hw}")
    y = cupy.empty((n, c) + tuple(out_hw), x.dtype)
    if y.size == 0:
        return y
    args = (x, y, _i64(y.size), *_plane_args(out_hw), _i32(h), _i32(w))
    _kernel("pool", "adaptive_avg_pool2d", x.dtype)((_grid(y.size, _BLOCK),), (_BLOCK,), args)
    return y


def im2col(x: Any, kernel: Pair, stride: Pair, padding: tuple[int, ...], dilation: Pair, out_hw: Pair) -> Any:
    """x (N, C, H, W) -> cols (N, C*kh*kw, OH*OW) with zero padding; row c*kh*kw + i*kw + j matches an OIHW
    weight reshaped to (O, C*kh*kw), so a convolution is weight.reshape(O, -1) @ cols (batched over N).
    padding: (ph, pw) or (top, bottom, left, right)."""
    x = _nchw(x, "im2col")
    _positive("im2col", kernel=kernel, stride=stride, dilation=dilation)
    (ph, pw), (n, c, h, w) = _top_left(padding, "im2col"), x.shape
    (kh, kw), (oh, ow) = kernel, out_hw
    cols = cupy.empty((n, c * kh * kw, oh * ow), x.dtype)
    if cols.size == 0:
        return cols
    if oh * ow > _INT_MAX:
        raise ValueError(f"im2col: {oh}x{ow} outputs per plane are too many (at most 2**31-1)")
    args = (x, cols, _i64(cols.size), *_div(oh * ow), *_div(kw), *_div(kh), *_div(ow), _i32(h), _i32(w),
            _i32(stride[0]), _i32(stride[1]), _i32(ph), _i32(pw), _i32(dilation[0]), _i32(dilation[1]))  # fmt: skip
    _kernel("im2col", "im2col", x.dtype)((_grid(cols.size, _BLOCK),), (_BLOCK,), args)
    return cols
