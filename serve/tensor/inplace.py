"""In-place operations (`add_`, `x += y`, `x[i] = v`, `copy_`, `fill_`, ...).

Without a graph, the result is written into the tensor's storage (so views see it). With a graph, the
operation is computed on a shadow of the old value, the result is written into the storage, and the
tensor is rebased onto the new node, as PyTorch does. An in-place operation on a leaf that requires
grad raises, as in PyTorch, unless under no_grad.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from serve.tensor import dtypes, versions
from serve.tensor.grad_mode import state
from serve.tensor.tensor import Tensor, _make


def check_inplace(self: Tensor) -> None:
    """Raise, as PyTorch does, for an in-place change of a leaf that requires grad (or of a view of one)."""
    if not state.enabled:
        return
    if self._requires_grad and self._grad_fn is None:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    view = getattr(self, "_view", None)
    while view is not None:
        base = view[0]
        if base._requires_grad and base._grad_fn is None:
            raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation.")
        view = getattr(base, "_view", None)


def _shadow(self: Tensor, copy: bool) -> Tensor:
    """A tensor standing for self's current value and graph position (its data copied when `copy`)."""
    out = _make(self._data.copy() if copy else self._data, self._dtype, self._device, self._ops)
    if self._requires_grad:
        out._grad_fn, out._output_nr, out._requires_grad = self._grad_fn, self._output_nr, True
    return out


def _record(self: Tensor, shadow: Tensor, result: Tensor) -> None:
    """After self's storage took `result`'s values, make self's graph say so (and its bases' graphs)."""
    from serve.tensor.function import Clone, IndexPut, Where

    if not (state.enabled and (self._requires_grad or result._requires_grad)):
        return
    if not result._requires_grad:
        # the old value is overwritten by a constant: keep self in the graph, passing zero gradient back
        never = _make(self._ops.asarray(False), dtypes.bool, self._device, self._ops)
        result = Where.apply(never, shadow, result)
    elif result._grad_fn is None:  # result is a leaf: hang a node between so self stays a non-leaf
        result = Clone.apply(result)
    self._grad_fn, self._output_nr, self._requires_grad = result._grad_fn, result._output_nr, True
    # self may be `base[index]`: base's value changed too, record it as base with base[index] = self
    view, info = self, getattr(self, "_view", None)
    while info is not None:
        base, index = info
        out = IndexPut.apply(_shadow(base, copy=False), view, index=index)
        base._grad_fn, base._output_nr, base._requires_grad = out._grad_fn, out._output_nr, True
        view, info = base, getattr(base, "_view", None)


def assign(self: Tensor, compute: Callable[[Tensor], Tensor]) -> Tensor:
    """Replace self's value by `compute(old value)`, in place, keeping autograd right."""
    check_inplace(self)
    recording = state.enabled
    shadow = _shadow(self, copy=True) if recording and self._requires_grad else self.detach()
    result = compute(shadow)
    if not dtypes.can_cast(result._dtype, self._dtype):
        raise RuntimeError(
            f"result type {_name(result._dtype)} can't be cast to the desired output type {_name(self._dtype)}"
        )
    if result.shape != self.shape:
        if result.numel() == self.numel() or result.ndim > self.ndim:
            raise RuntimeError(
                f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(result.shape)}"
            )
        result = result.expand(self.shape)
    if result._dtype is not self._dtype:
        result = result.to(self._dtype)
    self._ops.copyto(self._data, result._data)
    versions.bump(self._data)
    _record(self, shadow, result)
    return self


_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int64": "Long",
          "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool"}  # fmt: skip


def _name(dt: dtypes.dtype) -> str:
    return _NAMES.get(dt.name, dt.name)


# `x += y` and friends on float tensors with no graph to record: one backend call writing into x's storage
_DIRECT = {"add": "add", "sub": "sub", "mul": "mul", "div": "div"}
_DIRECT_DTYPES = (dtypes.float32, dtypes.float64)
_SCALARS = (int, float, bool)


def _writes_directly(self: Tensor, other: Any) -> Any:
    """`other`'s array (or scalar) when `self op= other` can be one ufunc into self's storage, else None."""
    if self._dtype not in _DIRECT_DTYPES:
        return None
    if type(other) in _SCALARS:
        return None if state.enabled and self._requires_grad else other
    if not isinstance(other, Tensor) or other._dtype is not self._dtype or other._device != self._device:
        return None
    if state.enabled and (self._requires_grad or other._requires_grad):
        return None
    so, ss = other._data.shape, self._data.shape
    if so != ss and (len(so) > len(ss) or any(a != b and a != 1 for a, b in zip(so[::-1], ss[::-1]))):
        return None
    return other._data


def inplace_version(op: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """`op_` from `op`: the same operation written into the first argument."""
    direct = _DIRECT.get(op.__name__)

    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if direct is not None and len(args) == 1 and not kwargs:
            operand = _writes_directly(self, args[0])
            if operand is not None:
                self._ops.binary_(direct, self._data, operand)
                versions.bump(self._data)
                return self
        return assign(self, lambda old: op(old, *args, **kwargs))

    method.__name__ = op.__name__ + "_"
    method.__doc__ = f"In-place version of `{op.__name__}`."
    return method


def copy_(self: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
    if not isinstance(src, Tensor):
        raise TypeError(f"copy_(): argument 'src' must be Tensor, not {type(src).__name__}")
    check_inplace(self)
    _own_broadcast_storage(self)
    src = src.to(self._device)
    if src._dtype is not self._dtype:  # copy_ may turn a float into an int or a bool, unlike arithmetic
        src = src.to(self._dtype)
    if src.shape != self.shape:
        try:
            src = src.expand(self.shape)
        except RuntimeError:
            raise RuntimeError(
                f"The size of tensor a ({list(self.shape)}) must match the size of tensor b ({list(src.shape)})"
            ) from None
    if not (state.enabled and (self._requires_grad or src._requires_grad)):
        self._ops.copyto(self._data, src._data)
        versions.bump(self._data)
        return self
    shadow = _shadow(self, copy=False)  # the old value is not needed: its gradient is zero
    self._ops.copyto(self._data, src._data)
    versions.bump(self._data)
    _record(self, shadow, src)
    return self


def _own_broadcast_storage(self: Tensor) -> None:
    """An expand()ed tensor is a read-only numpy broadcast view: writing into it first gives it its own storage (so
    the tensor it was expanded from does not see the write), unless an expanded dimension repeats elements, which
    torch refuses too. transformers' BERT-family builds copy into `arange(n).expand((1, -1))` buffers."""
    data = self._data
    if getattr(data.flags, "writeable", True):  # numpy's broadcast views are read-only; CuPy has no such flag
        return
    if any(stride == 0 and size > 1 for stride, size in zip(data.strides, data.shape, strict=True)):
        raise RuntimeError(
            "unsupported operation: more than one element of the written-to tensor refers to a single memory "
            "location. Please clone() the tensor before performing the operation."
        )
    self._data = data.copy()


def fill_(self: Tensor, value: Any) -> Tensor:
    check_inplace(self)
    if isinstance(value, Tensor):
        if value.ndim:
            raise RuntimeError(
                f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} dimensions."
            )
        value = value.item()
    self._data[...] = value
    versions.bump(self._data)
    if state.enabled and self._requires_grad:
        _record(self, _shadow(self, copy=False), self.detach())
    return self


def zero_(self: Tensor) -> Tensor:
    return fill_(self, 0)
