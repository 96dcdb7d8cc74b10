"""Indexing: `x[...]` and `x[...] = v`, index_select, masked_select/masked_fill, gather, nonzero.

Indices follow PyTorch (which follows numpy): ints, slices with positive steps, None, Ellipsis, and
integer or bool tensors/lists for advanced indexing. Basic indexing returns a view; advanced indexing
copies. An index tensor must be int64, int32, uint8 or bool.
"""

from __future__ import annotations

from typing import Any

from serve.tensor import dtypes, versions
from serve.tensor import function as fn
from serve.tensor.grad_mode import state
from serve.tensor.inplace import assign, check_inplace
from serve.tensor.tensor import Tensor, _make, wrap_dim

_INDEX_DTYPES = (dtypes.int64, dtypes.int32, dtypes.int16, dtypes.int8, dtypes.uint8, dtypes.bool)


def _index_array(t: Tensor, ops: Any) -> Any:
    if t._dtype not in _INDEX_DTYPES:
        raise IndexError(f"tensors used as indices must be long, int, byte or bool tensors, got {t._dtype!r}")
    data = t._data if t._ops is ops else ops.from_numpy(t._ops.to_numpy(t._data))
    return data.astype(bool) if t._dtype is dtypes.uint8 else data


def _item(i: Any, ops: Any) -> Any:
    if isinstance(i, Tensor):
        if i._data.ndim == 0 and i._dtype._category == dtypes._INT:
            return int(i.item())
        return _index_array(i, ops)
    if isinstance(i, slice):
        if i.step is not None and int(i.step) <= 0:
            raise ValueError("step must be greater than zero")
        return slice(*(int(v) if isinstance(v, Tensor) else v for v in (i.start, i.stop, i.step)))
    if isinstance(i, (list, tuple)):
        arr = ops.asarray([int(v) if isinstance(v, Tensor) else v for v in i])
        if arr.dtype.kind not in "iub" and arr.size:
            raise IndexError(f"index list must hold ints or bools, got {list(i)!r}")
        return arr.astype("int64") if arr.dtype.kind != "b" else arr
    if i is None or i is Ellipsis or isinstance(i, (int, bool)):
        return i
    if hasattr(i, "__index__"):
        return int(i)
    raise IndexError(
        f"only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid indices "
        f"(got {type(i).__name__})"
    )


def convert_index(index: Any, ops: Any) -> Any:
    """A Python/Tensor index turned into one the backend arrays accept."""
    if isinstance(index, tuple):
        return tuple(_item(i, ops) for i in index)
    return _item(index, ops)


def _checked(x: Tensor, index: Any) -> Any:
    try:
        return x._data[index]
    except IndexError as e:
        raise IndexError(str(e).replace("axis", "dimension")) from None


def getitem(self: Tensor, index: Any) -> Tensor:
    if type(index) is int and self._data.ndim and not (self._requires_grad and state.enabled):
        try:
            out = _make(self._data[index], self._dtype, self._device, self._ops)
        except IndexError:
            pass  # the full path below raises with PyTorch's wording
        else:
            out._view = (self, index)
            return out
    idx = convert_index(index, self._ops)
    if state.enabled and self._requires_grad:
        _checked(self, idx)
        out = fn.Index.apply(self, index=idx)
    else:
        out = _make(_checked(self, idx), self._dtype, self._device, self._ops)
    if fn._is_basic(idx):
        out._view = (self, idx)
    return out


def setitem(self: Tensor, index: Any, value: Any) -> None:
    idx = convert_index(index, self._ops)
    if isinstance(value, Tensor):
        if value._dtype is not self._dtype:
            value = value.to(self._dtype)
        if value._device != self._device:
            value = value.to(self._device)
    recording = state.enabled and (self._requires_grad or (isinstance(value, Tensor) and value._requires_grad))
    if not recording:
        check_inplace(self)
        try:
            self._data[idx] = value._data if isinstance(value, Tensor) else value
        except ValueError as e:
            raise RuntimeError(f"shape mismatch in index assignment: {e}") from None
        versions.bump(self._data)
        return
    if not isinstance(value, Tensor):
        value = _make(self._ops.asarray(value, dtype=self._dtype.np), self._dtype, self._device, self._ops)
    assign(self, lambda shadow: fn.IndexPut.apply(shadow, value, index=idx))


def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index._dtype not in (dtypes.int64, dtypes.int32):
        raise RuntimeError(f"index_select(): Expected dtype int32/int64 for index but got: {index._dtype.name}")
    d = wrap_dim(dim, input.ndim)
    return getitem(input, (slice(None),) * d + (index.reshape(-1),))


def masked_select(input: Tensor, mask: Tensor) -> Tensor:
    _check_mask(mask, "masked_select")
    x, m = _broadcast(input, mask)
    return getitem(x, m)


def _broadcast(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    from serve.tensor.shape_ops import broadcast_tensors

    return broadcast_tensors(a, b)  # type: ignore[return-value]


def _check_mask(mask: Tensor, name: str) -> None:
    if mask._dtype is not dtypes.bool:
        raise RuntimeError(f"{name} only supports boolean masks, but got mask with dtype {mask._dtype.name}")


def masked_fill(input: Tensor, mask: Tensor, value: Any) -> Tensor:
    from serve.tensor.math_ops import broadcast_shapes, where

    _check_mask(mask, "masked_fill_")
    if isinstance(value, Tensor):
        if value.ndim:
            raise RuntimeError(
                "masked_fill_ only supports a 0-dimensional value tensor, "
                f"but got tensor with {value.ndim} dimension(s)."
            )
        value = value.to(input._dtype)
    if broadcast_shapes(input.shape, mask.shape) != input.shape:
        raise RuntimeError(
            f"The expanded size of the tensor ({input.shape}) must match the mask's broadcast shape ({mask.shape})"
        )
    if not isinstance(value, Tensor):
        value = _make(input._ops.asarray(value, dtype=input._dtype.np), input._dtype, input._device, input._ops)
    return where(mask, value, input)


def gather(input: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False) -> Tensor:
    if index._dtype is not dtypes.int64:
        raise RuntimeError(f"gather(): Expected dtype int64 for index, got {index._dtype.name}")
    d = wrap_dim(dim, input.ndim)
    if index.ndim != input.ndim and input.ndim:
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    for k in range(index.ndim):
        if k != d and index.shape[k] > input.shape[k]:
            raise RuntimeError(
                f"Size does not match at dimension {k} expected index {list(index.shape)} to be smaller than self "
                f"{list(input.shape)} apart from dimension {d}"
            )
    size = input.shape[d] if input.ndim else 1
    # unlike indexing, gather takes no negative indices (PyTorch raises for them too)
    if index.numel() and (int(index.max()) >= size or int(index.min()) < 0):
        bad = int(index.max()) if int(index.max()) >= size else int(index.min())
        raise RuntimeError(f"index {bad} is out of bounds for dimension {d} with size {size}")
    x = input
    if input.ndim and index.shape != input.shape:
        x = input[tuple(slice(None) if k == d else slice(0, index.shape[k]) for k in range(input.ndim))]
    idx = index
    if state.enabled and x._requires_grad:
        return fn.Gather.apply(x, idx, axis=d)
    return _make(x._ops.take_along_axis(x._data, idx._data, d), x._dtype, x._device, x._ops)


def take(input: Tensor, index: Tensor) -> Tensor:
    return getitem(input.reshape(-1), index)


def nonzero(input: Tensor, *, as_tuple: bool = False) -> Any:
    parts = input._ops.nonzero(input._data if input.ndim else input._data.reshape(1))
    if as_tuple:  # a 0-d input answers like a 1-element 1-D one, as in PyTorch
        return tuple(_make(p.astype("int64"), dtypes.int64, input._device, input._ops) for p in parts)
    if not input.ndim:  # PyTorch: one (n, 0) row per nonzero element of a 0-d tensor
        stacked = input._ops.zeros((len(parts[0]), 0), "int64")
    else:
        stacked = input._ops.stack(parts, axis=1)
    return _make(stacked.astype("int64"), dtypes.int64, input._device, input._ops)


def argwhere(input: Tensor) -> Tensor:
    return nonzero(input)
