"""A planned convolution's output that may still take its residual add in the product's epilogue.

ResNet-style blocks end in `out = bn(conv(x)); out += identity; out = relu(out)`. The add is the block's own
Python, which the plan runs as written, so the convolution cannot be handed `identity` up front. Instead, where the
capture saw its (folded) output take an in-place add next, the convolution returns a `PendingOutput`: a tensor whose
array is made at first use. Its first use is either

- `out += t`: the convolution runs now with `t` added in its epilogue (and, where the capture saw the activation
  consume the sum, that activation too), so the add is no extra pass over memory; or
- anything else (reading its values, its shape, another operation): the convolution runs plainly and the tensor is
  an ordinary one from then on.

Either way the values are exactly what the unfused code computes; the in-place add bumps the storage version as any
in-place write does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from serve.inference.deferred import Deferred, deferred_like
from serve.tensor import dtypes, versions
from serve.tensor.tensor import Tensor

if TYPE_CHECKING:
    from serve.inference.planned import PlannedConv2d

__all__ = ["PendingOutput", "pending"]


class PendingOutput(Deferred):  # type: ignore[misc]
    """See the module docstring. `_data` computes the convolution at first access."""

    __slots__ = ("_input", "_shape")
    _input: Tensor | None
    _layer: PlannedConv2d | None
    _shape: tuple[int, ...]

    def _make(self) -> np.ndarray:
        data = self._layer.compute(self._input, None)  # type: ignore[union-attr, arg-type]
        self._input = None
        return data

    def __iadd__(self, other: Any) -> Tensor:
        layer = self._layer
        if layer is not None and _fits(other, self):
            self._layer = None
            data = layer.compute(self._input, other._data)  # type: ignore[arg-type]
            self._data = data
            self._input = None
            versions.bump(data)
            layer.after_residual(self)
            return self
        return Tensor.__iadd__(self, other)  # the plain path (computes the convolution first)


def _fits(other: Any, out: PendingOutput) -> bool:
    """Whether `other` can be read as the epilogue's residual: a float32 CPU tensor of the output's shape."""
    return (isinstance(other, Tensor) and not isinstance(other, PendingOutput) and other._dtype is dtypes.float32
            and other._device.type == "cpu" and tuple(other._data.shape) == out._shape
            and not other._requires_grad)  # fmt: skip


def pending(layer: PlannedConv2d, x: Tensor, shape: tuple[int, ...]) -> PendingOutput:
    """The convolution of x by `layer`, not computed yet."""
    t = deferred_like(PendingOutput, x)
    t._layer, t._input, t._shape = layer, x, shape
    return t
