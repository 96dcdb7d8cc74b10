"""The no-graph fast path shared by attention and the recurrences: their cores are written once against a few
names (`matmul`, `softmax`, `where`, ...) that both the Tensor functions and the backend modules provide, and
run on the backend's arrays when autograd records nothing (serving), so each step pays no Tensor bookkeeping.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from serve.nn.functional.linear import linear
from serve.tensor import reduce_ops
from serve.tensor.grad_mode import is_grad_enabled
from serve.tensor.linalg import matmul
from serve.tensor.math_ops import logical_not, relu, sigmoid, tanh, where
from serve.tensor.shape_ops import cat, flip, stack
from serve.tensor.tensor import Tensor, _make

# the Tensor functions under the backend modules' names and positional signatures
TENSOR_MATH = SimpleNamespace(
    linear=linear, matmul=matmul, sigmoid=sigmoid, tanh=tanh, relu=relu, softmax=reduce_ops.softmax, where=where,
    logical_not=logical_not, all=reduce_ops.all, any=reduce_ops.any, stack=stack, concatenate=cat, flip=flip,
    ascontiguousarray=lambda t: t.contiguous(),
)  # fmt: skip


def records(*tensors: Tensor | None) -> bool:
    """Whether autograd would record an operation on these tensors."""
    return is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def math_for(on_arrays: bool, like: Tensor) -> Any:
    """The namespace to compute with: `like`'s backend module on arrays, else the Tensor functions."""
    return like._ops if on_arrays else TENSOR_MATH


def unwrap(t: Tensor | None, on_arrays: bool) -> Any:
    """The tensor's backend array on the array path, else the tensor itself (None stays None)."""
    return t._data if on_arrays and t is not None else t


def wrap(a: Any, like: Tensor) -> Tensor:
    """A backend array computed on the array path, as a Tensor of `like`'s dtype and device."""
    return _make(a, like._dtype, like._device, like._ops)
