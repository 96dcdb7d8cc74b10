"""Padding layers over `F.pad`: `nn.ZeroPad1d/2d`, `nn.ConstantPad1d/2d`, `nn.ReflectionPad1d/2d`,
`nn.ReplicationPad1d/2d`, `nn.CircularPad1d/2d`.

An int pads every side; a tuple is F.pad's (left, right[, top, bottom]). Attributes and reprs are PyTorch's.
"""

from __future__ import annotations

from typing import Any

from serve.nn.functional.vision import pad
from serve.nn.module import Module
from serve.tensor.tensor import Tensor

__all__ = [
    "CircularPad1d", "CircularPad2d", "ConstantPad1d", "ConstantPad2d", "ReflectionPad1d", "ReflectionPad2d",
    "ReplicationPad1d", "ReplicationPad2d", "ZeroPad1d", "ZeroPad2d",
]  # fmt: skip


def _sides(padding: Any, n: int) -> tuple[int, ...]:
    if isinstance(padding, (tuple, list)):
        if len(padding) != n:
            raise ValueError(f"padding must be an int or a tuple of {n} ints, got {padding!r}")
        return tuple(padding)
    return (padding,) * n


class _PadNd(Module):
    mode = "constant"
    _sides = 2

    def __init__(self, padding: Any) -> None:
        super().__init__()
        self.padding = _sides(padding, self._sides)

    def forward(self, input: Tensor) -> Tensor:
        return pad(input, self.padding, self.mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding: Any, value: float) -> None:
        super().__init__(padding)
        self.value = value

    def forward(self, input: Tensor) -> Tensor:
        return pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    pass


class ConstantPad2d(_ConstantPadNd):
    _sides = 4


class ZeroPad1d(ConstantPad1d):
    def __init__(self, padding: Any) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad2d(ConstantPad2d):
    def __init__(self, padding: Any) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ReflectionPad1d(_PadNd):
    mode = "reflect"


class ReflectionPad2d(_PadNd):
    mode, _sides = "reflect", 4


class ReplicationPad1d(_PadNd):
    mode = "replicate"


class ReplicationPad2d(_PadNd):
    mode, _sides = "replicate", 4


class CircularPad1d(_PadNd):
    mode = "circular"


class CircularPad2d(_PadNd):
    mode, _sides = "circular", 4
