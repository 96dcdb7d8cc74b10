"""`torch._dynamo`: the decorators and checks libraries import from torch's graph compiler, all eager on serve
(see serve.compat.torch.compiler)."""

from __future__ import annotations

from typing import Any

from serve.compat.torch.compiler import allow_in_graph, assume_constant_result, disable, is_compiling


def mark_static_address(tensor: Any, guard: bool = True) -> None:
    """Nothing to mark: there is no graph capture to keep an address stable for."""


def reset() -> None:
    """No compiled graphs to forget."""


__all__ = ["allow_in_graph", "assume_constant_result", "disable", "is_compiling", "mark_static_address", "reset"]
