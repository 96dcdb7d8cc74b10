"""`Parameter` and `Buffer`: tensors that a `Module` registers when they are assigned as attributes.

As in PyTorch, a `Parameter` is a `Tensor` subclass that shares its data with the tensor it wraps and
requires grad by default; operations on it return plain tensors. A `Buffer` marks a tensor that should be
registered as a buffer (persistent or not) on assignment.
"""

from __future__ import annotations

from typing import Any

from serve.tensor.creation import empty
from serve.tensor.tensor import Tensor, _new


def _wrap(cls: type, data: Tensor | None) -> Any:
    src = empty(0) if data is None else data
    if not isinstance(src, Tensor):
        raise TypeError(f"{cls.__name__} expects a Tensor, got {type(src).__name__}")
    out: Any = _new(cls)
    for slot in ("_data", "_dtype", "_device", "_ops"):
        setattr(out, slot, getattr(src, slot))
    out._grad, out._grad_fn, out._output_nr = None, None, 0
    return out


class Parameter(Tensor):
    """A tensor that is a module's learnable parameter: `self.weight = nn.Parameter(serve.empty(3, 4))`."""

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True) -> Parameter:
        out = _wrap(cls, data)
        out._requires_grad = False
        out.requires_grad_(requires_grad)
        return out

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True) -> None:
        pass

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return "Parameter containing:\n" + super().__repr__()

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (_rebuild_parameter, (self.detach(), self._requires_grad))


def _rebuild_parameter(data: Tensor, requires_grad: bool) -> Parameter:
    return Parameter(data, requires_grad)


class Buffer(Tensor):
    """A tensor to register as a buffer on assignment: `self.mask = nn.Buffer(serve.ones(4), persistent=False)`."""

    persistent: bool

    def __new__(cls, data: Tensor | None = None, *, persistent: bool = True) -> Buffer:
        out = _wrap(cls, data)
        out._requires_grad = data._requires_grad if data is not None else False
        out.persistent = persistent
        return out

    def __init__(self, data: Tensor | None = None, *, persistent: bool = True) -> None:
        pass
