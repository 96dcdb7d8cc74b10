"""Reductions: sum, mean, var/std, prod, max/min (with and without dim), argmax/argmin, cumsum, norm, all/any.

`dim` may be an int, a tuple/list of ints, or None (all dims), as in PyTorch. Integer and bool sums
promote to int64; half-precision sums accumulate in float32.
"""

from __future__ import annotations

import builtins
import math
from typing import Any

from serve.tensor import dtypes, return_types
from serve.tensor import function as fn
from serve.tensor.grad_mode import state
from serve.tensor.tensor import Tensor, _make, wrap_dim

_FLOAT = dtypes._FLOAT

_TYPE_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int64": "Long",
               "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool"}  # fmt: skip


def _axes(x: Tensor, dim: Any) -> tuple[int, ...] | None:
    """Normalised reduction axes; None means all of them."""
    if dim is None:
        return None
    if type(dim) is int and -x._data.ndim <= dim < x._data.ndim:
        return (dim % x._data.ndim,)
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if not dims:
        return None
    axes = tuple(wrap_dim(d, x.ndim) for d in dims)
    if len(set(axes)) != len(axes):
        raise RuntimeError(f"dim {axes} appears multiple times in the list of dims")
    return axes if x.ndim else None


def _reduced_count(x: Tensor, axes: tuple[int, ...] | None) -> int:
    return x.numel() if axes is None else math.prod(x.shape[a] for a in axes)


def sum(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    axes = _axes(input, dim)
    if dtype is None:
        dtype = input._dtype if input._dtype._category >= _FLOAT else dtypes.int64
    if state.enabled and input._requires_grad:
        return fn.Sum.apply(input, axis=axes, keepdim=keepdim, dtype=dtype)
    return _make(input._ops.sum(input._data, axes, keepdim, dtype.np), dtype, input._device, input._ops)


def nansum(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    return sum(input.masked_fill(input.isnan(), 0), dim, keepdim, dtype=dtype)


def mean(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    if dtype is not None:
        input = input.to(dtype)
    if input._dtype._category < _FLOAT:
        raise RuntimeError(
            "mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. "
            f"Got: {input._dtype.name}"
        )
    axes = _axes(input, dim)
    n = _reduced_count(input, axes)
    if input._dtype in (dtypes.float16, dtypes.bfloat16):  # accumulate and divide in float32, round once
        return (sum(input, axes, keepdim, dtype=dtypes.float32) / n).to(input._dtype)
    return sum(input, axes, keepdim) / n if n else sum(input, axes, keepdim) * float("nan")


def _centered(input: Tensor, dim: Any, unbiased: Any, correction: Any) -> tuple[Tensor, Any, int]:
    """(input - its mean, the reduction axes, degrees of freedom) from var/std's arguments:
    `correction` (default 1, Bessel) or the older `unbiased` flag, as in PyTorch."""
    if isinstance(unbiased, bool) or dim is True or dim is False:
        if isinstance(dim, bool):
            unbiased, dim = dim, None
        correction = 1 if unbiased else 0
    if correction is None:
        correction = 1
    if input._dtype._category < _FLOAT:
        raise RuntimeError(f"std and var only support floating point and complex dtypes, got {input._dtype.name}")
    axes = _axes(input, dim)
    dof = _reduced_count(input, axes) - correction
    return input - mean(input, axes, keepdim=True), axes, dof


def var(
    input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None
) -> Tensor:
    """Variance over `dim`; `correction` (default 1, Bessel) or the older `unbiased` flag, like PyTorch."""
    centered, axes, dof = _centered(input, dim, unbiased, correction)
    return sum(centered * centered, axes, keepdim) / builtins.max(dof, 0)  # `max` is ours here


def std(
    input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None
) -> Tensor:
    """Standard deviation over `dim` (arguments as for `var`); its gradient is 0 where it is 0, like PyTorch's."""
    centered, axes, dof = _centered(input, dim, unbiased, correction)
    if dof <= 0:  # no degrees of freedom: nan or inf, with PyTorch's nan gradient
        return (sum(centered * centered, axes, keepdim) / 0).sqrt()
    # sqrt(sum(c * c)) is the 2-norm, whose primitive masks the gradient where the norm is 0 (sqrt' is inf there)
    return fn.Norm2.apply(centered, axis=axes, keepdim=keepdim) / math.sqrt(dof)


def var_mean(input: Tensor, dim: Any = None, *, correction: Any = 1, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    return var(input, dim, keepdim=keepdim, correction=correction), mean(input, dim, keepdim)


def std_mean(input: Tensor, dim: Any = None, *, correction: Any = 1, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    return std(input, dim, keepdim=keepdim, correction=correction), mean(input, dim, keepdim)


def prod(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    if dtype is None:
        dtype = input._dtype if input._dtype._category >= _FLOAT else dtypes.int64
    x = input.to(dtype)
    flat = dim is None
    x, axis = (x.reshape(-1), 0) if flat else (x, wrap_dim(dim, x.ndim))
    keep = keepdim and not flat
    if state.enabled and x._requires_grad:
        out = fn.Prod.apply(x, axis=axis, keepdim=keep)
    else:
        out = _make(x._ops.prod(x._data, axis, keep, dtype.np), dtype, x._device, x._ops)
    return out.reshape((1,) * input.ndim) if flat and keepdim else out


def _max_min(input: Tensor, dim: Any, keepdim: bool, other: Any, largest: bool) -> Any:
    from serve.tensor.math_ops import maximum, minimum

    name = "max" if largest else "min"
    if isinstance(dim, Tensor):
        other, dim = dim, None
    if other is not None:
        return maximum(input, other) if largest else minimum(input, other)
    if dim is None:
        if input.numel() == 0:
            raise RuntimeError(
                f"{name}(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim "
                "with the 'dim' argument."
            )
        return amax(input, None, False, largest=largest)
    axis = wrap_dim(dim, input.ndim)
    if input.ndim and input.shape[axis] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {axis} to have non-zero size.")
    indices = argmax(input, axis, keepdim=True) if largest else argmin(input, axis, keepdim=True)
    values = input.gather(axis, indices) if input.ndim else input.clone()
    if not keepdim and input.ndim:
        values, indices = values.squeeze(axis), indices.squeeze(axis)
    return (return_types.max if largest else return_types.min)(values, indices)


def max(input: Tensor, dim: Any = None, keepdim: bool = False, *, other: Any = None) -> Any:
    return _max_min(input, dim, keepdim, other, largest=True)


def min(input: Tensor, dim: Any = None, keepdim: bool = False, *, other: Any = None) -> Any:
    return _max_min(input, dim, keepdim, other, largest=False)


def amax(input: Tensor, dim: Any = None, keepdim: bool = False, *, largest: bool = True) -> Tensor:
    axes = _axes(input, dim)
    name = "amax" if largest else "amin"
    if input.numel() == 0:
        for a in range(input.ndim) if axes is None else axes:
            if input.shape[a] == 0:
                raise IndexError(f"{name}(): Expected reduction dim {a} to have non-zero size.")
    if state.enabled and input._requires_grad:
        return fn.Amax.apply(input, axis=axes, keepdim=keepdim, largest=largest)
    raw = (input._ops.amax if largest else input._ops.amin)(input._data, axes, keepdim)
    return _make(raw, input._dtype, input._device, input._ops)


def amin(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return amax(input, dim, keepdim, largest=False)


def _arg(input: Tensor, dim: Any, keepdim: bool, largest: bool) -> Tensor:
    ops = input._ops
    fn_ = ops.argmax if largest else ops.argmin
    name = "argmax" if largest else "argmin"
    if input.numel() == 0 and dim is None:
        raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
    if input.numel() == 0 and input.ndim and input.shape[wrap_dim(dim, input.ndim)] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {wrap_dim(dim, input.ndim)} to have non-zero size.")
    if dim is None:
        raw = fn_(input._data.reshape(-1), 0, False)
        if keepdim:
            raw = raw.reshape((1,) * input.ndim)
    else:
        raw = fn_(input._data, wrap_dim(dim, input.ndim) if input.ndim else None, keepdim and input.ndim > 0)
    return _make(raw.astype(dtypes.int64.np, copy=False), dtypes.int64, input._device, ops)


def argmax(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return _arg(input, dim, keepdim, True)


def argmin(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return _arg(input, dim, keepdim, False)


def cumsum(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    if dtype is None:
        dtype = input._dtype if input._dtype._category >= _FLOAT else dtypes.int64
    axis = wrap_dim(dim, input.ndim)
    if input.ndim == 0:
        return input.to(dtype).clone()
    if state.enabled and input._requires_grad:
        return fn.Cumsum.apply(input, axis=axis, dtype=dtype)
    return _make(input._ops.cumsum(input._data, axis, dtype.np), dtype, input._device, input._ops)


def all(input: Tensor, dim: Any = None, keepdim: bool = False, *, axis: Any = None, keepdims: bool = False) -> Tensor:
    """`axis`/`keepdims`: numpy's spellings, which torch accepts too (transformers' beam search uses them)."""
    return _logical_reduce(input, input._ops.all, dim if axis is None else axis, keepdim or keepdims)


def any(input: Tensor, dim: Any = None, keepdim: bool = False, *, axis: Any = None, keepdims: bool = False) -> Tensor:
    return _logical_reduce(input, input._ops.any, dim if axis is None else axis, keepdim or keepdims)


def _logical_reduce(input: Tensor, func: Any, dim: Any, keepdim: bool) -> Tensor:
    """all/any: bool results, except that uint8 inputs give uint8 0/1 (PyTorch keeps that legacy)."""
    out = func(input._data, _axes(input, dim), keepdim)
    dt = dtypes.uint8 if input._dtype is dtypes.uint8 else dtypes.bool
    return _make(out.astype(dt.np, copy=False), dt, input._device, input._ops)


def count_nonzero(input: Tensor, dim: Any = None) -> Tensor:
    return sum(input != 0, dim)


def norm(input: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    """Vector p-norm over `dim` (all elements by default); 'fro' is the 2-norm of the flattened dims."""
    if dtype is not None:
        input = input.to(dtype)
    if input._dtype._category < _FLOAT:
        raise RuntimeError(
            "linalg.vector_norm: Expected a floating point or complex tensor as input. "
            f"Got {_TYPE_NAMES[input._dtype.name]}"
        )
    if p in ("fro", 2, 2.0, None):
        return fn.Norm2.apply(input, axis=_axes(input, dim), keepdim=keepdim)
    a = input.abs()
    if p == float("inf"):
        return amax(a, dim, keepdim)
    if p == float("-inf"):
        return amin(a, dim, keepdim)
    if p == 0:
        return sum((a != 0).to(input._dtype), dim, keepdim)
    if p == 1:
        return sum(a, dim, keepdim)
    if isinstance(p, str):
        raise RuntimeError(f"norm: unsupported p={p!r}; use a number, inf, -inf or 'fro'")
    # where-guarded powers: d|x|^p at x = 0 and d s^(1/p) at s = 0 are inf * 0 = nan; PyTorch makes them 0
    from serve.tensor.math_ops import where

    zero = a == 0
    s = sum(where(zero, 0.0, where(zero, 1.0, a) ** p), dim, keepdim)
    s_zero = s == 0
    return where(s_zero, 0.0, where(s_zero, 1.0, s) ** (1.0 / p))


def softmax(input: Tensor, dim: int, dtype: Any = None) -> Tensor:
    return _softmax(fn.Softmax, "softmax", input, dim, dtype)


def log_softmax(input: Tensor, dim: int, dtype: Any = None) -> Tensor:
    return _softmax(fn.LogSoftmax, "log_softmax", input, dim, dtype)


def _softmax(prim: Any, name: str, x: Tensor, dim: Any, dtype: Any) -> Tensor:
    if dtype is not None:
        x = x.to(dtype)
    if x._dtype._category < _FLOAT:
        raise RuntimeError(
            f"\"{name}_lastdim_kernel_impl\" not implemented for '{x._dtype.name}': pass a floating tensor or dtype="
        )
    ndim = x._data.ndim
    if type(dim) is not int or not -ndim <= dim < ndim:
        if dim is None:
            raise TypeError(f"{name}() missing required argument 'dim' (implicit dim selection is deprecated)")
        if ndim == 0:
            wrap_dim(dim, 0)
            return (x * 0 + 1) if name == "softmax" else x * 0
        dim = wrap_dim(dim, ndim)
    axis = dim + ndim if dim < 0 else dim
    if x._requires_grad and state.enabled:
        return prim.apply(x, axis=axis)
    return _make(getattr(x._ops, name)(x._data, axis), x._dtype, x._device, x._ops)
