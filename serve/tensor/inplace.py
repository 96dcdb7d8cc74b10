"""In-place operations (`add_`, `x += y`, `x[i] = v`, `copy_`, `fill_`, ...).

Without a graph, the result is written into the tensor's storage (so views see it). With a graph, the
operation is computed on a shadow of the old value, the result is written into the storage, and the
tensor is rebased onto the new node, as PyTorch does. An in-place operation on a leaf that requires
grad raises, as in PyTorch, unless under no_grad.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from serve.tensor import dtypes
from serve.tensor.grad_mode import state
from serve.tensor.tensor import Tensor, _make


def check_inplace(self: Tensor) -> None:
    if state.enabled and self._requires_grad and self._grad_fn is None:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")


def assign(self: Tensor, compute: Callable[[Tensor], Tensor]) -> Tensor:
    """Replace self's value by `compute(old value)`, in place, keeping autograd right."""
    check_inplace(self)
    recording = state.enabled
    if recording and self._requires_grad:
        shadow = _make(self._data.copy(), self._dtype, self._device, self._ops)
        shadow._grad_fn, shadow._output_nr, shadow._requires_grad = self._grad_fn, self._output_nr, True
    else:
        shadow = self.detach()
    result = compute(shadow)
    if not dtypes.can_cast(result._dtype, self._dtype):
        raise RuntimeError(f"result type {_name(result._dtype)} can't be cast to the desired output type {_name(self._dtype)}")  # fmt: skip
    if result.shape != self.shape:
        if result.numel() == self.numel() or result.ndim > self.ndim:
            raise RuntimeError(
                f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(result.shape)}"
            )
        result = result.expand(self.shape)
    if result._dtype is not self._dtype:
        result = result.to(self._dtype)
    self._ops.copyto(self._data, result._data)
    if recording and result._requires_grad:
        if result._grad_fn is None:  # result is a leaf: hang a node between so self stays a non-leaf
            from serve.tensor.function import Clone

            result = Clone.apply(result)
        self._grad_fn, self._output_nr, self._requires_grad = result._grad_fn, result._output_nr, True
    return self


_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int64": "Long",
          "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool"}  # fmt: skip


def _name(dt: dtypes.dtype) -> str:
    return _NAMES.get(dt.name, dt.name)


def inplace_version(op: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """`op_` from `op`: the same operation written into the first argument."""

    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return assign(self, lambda old: op(old, *args, **kwargs))

    method.__name__ = op.__name__ + "_"
    method.__doc__ = f"In-place version of `{op.__name__}`."
    return method


def copy_(self: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
    if not isinstance(src, Tensor):
        raise TypeError(f"copy_(): argument 'src' must be Tensor, not {type(src).__name__}")
    src = src.to(self._device)
    if src._dtype is not self._dtype:
        src = src.to(self._dtype)

    def compute(old: Tensor) -> Tensor:
        return src.expand(self.shape) if src.shape != self.shape else src

    check_inplace(self)
    if not (state.enabled and (self._requires_grad or src._requires_grad)):
        self._ops.copyto(self._data, src._data)
        return self
    # copy_ may turn a float into an int or a bool, unlike arithmetic: skip assign's cast check
    result = compute(self)
    self._ops.copyto(self._data, result._data)
    if src._requires_grad:
        from serve.tensor.function import Clone

        node_out = Clone.apply(result)
        self._grad_fn, self._output_nr, self._requires_grad = node_out._grad_fn, node_out._output_nr, True
    return self


def fill_(self: Tensor, value: Any) -> Tensor:
    check_inplace(self)
    if isinstance(value, Tensor):
        if value.ndim:
            raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} dimensions.")  # fmt: skip
        value = value.item()
    self._data[...] = value
    return self


def zero_(self: Tensor) -> Tensor:
    return fill_(self, 0)
