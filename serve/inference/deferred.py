"""`Deferred`: a tensor whose array a planned layer makes at its first use, the base of the plan's pending outputs
(serve.inference.residual's convolution output that may still take `+= t` in its epilogue, and
serve.inference.addnorm's linear output or sum that may still fuse its add and the LayerNorm after it).

Tensor keeps its array in the `_data` slot; here `_data` is a property over that slot, so every reader (the ops, the
backend, `.numpy()`) makes the array first without knowing it was deferred. A subclass says how in `_make`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from serve.tensor.tensor import Tensor, _new

__all__ = ["Deferred", "deferred_like"]

_DATA: Any = Tensor.__dict__["_data"]  # the slot descriptor itself, under the property below


class Deferred(Tensor):  # type: ignore[misc]  # `_data` becomes a property over Tensor's slot
    """A tensor made at first use: `_make()` while `_layer` is set, an ordinary tensor from then on."""

    __slots__ = ("_layer",)
    _layer: Any

    @property  # type: ignore[override]
    def _data(self) -> Any:
        if self._layer is not None:
            data = self._make()
            self._layer = None
            _DATA.__set__(self, data)
        return _DATA.__get__(self, Tensor)

    @_data.setter
    def _data(self, value: Any) -> None:
        _DATA.__set__(self, value)

    def is_pending(self) -> bool:
        return self._layer is not None

    def _make(self) -> np.ndarray:
        raise NotImplementedError


def deferred_like(cls: type, like: Tensor) -> Any:
    """A new `cls` (a Deferred) with `like`'s dtype, device and backend, outside any graph."""
    t: Any = _new(cls)
    t._dtype, t._device, t._ops = like._dtype, like._device, like._ops
    t._requires_grad, t._grad_fn, t._grad, t._output_nr = False, None, None, 0
    return t
