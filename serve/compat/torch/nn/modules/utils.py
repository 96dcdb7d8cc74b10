"""`torch.nn.modules.utils`: the tuple helpers model files import (`from torch.nn.modules.utils import _pair`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import repeat
from typing import Any


def _ntuple(n: int, name: str = "parse") -> Callable[[Any], tuple[Any, ...]]:
    """A function turning a single value into an n-tuple of it, and an iterable into a tuple."""

    def parse(x: Any) -> tuple[Any, ...]:
        if isinstance(x, Iterable) and not isinstance(x, str):
            return tuple(x)
        return tuple(repeat(x, n))

    parse.__name__ = name
    return parse


_single = _ntuple(1, "_single")
_pair = _ntuple(2, "_pair")
_triple = _ntuple(3, "_triple")
_quadruple = _ntuple(4, "_quadruple")
