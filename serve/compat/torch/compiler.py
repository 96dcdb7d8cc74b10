"""`torch.compiler`: serve compiles nothing through torch's compiler (its inference plan is made at load), so every
check says "not compiling" and every decorator keeps the eager function."""

from __future__ import annotations

from typing import Any


def is_compiling() -> bool:
    return False


def is_dynamo_compiling() -> bool:
    return False


def is_exporting() -> bool:
    return False


def disable(fn: Any = None, recursive: bool = True, reason: str | None = None) -> Any:
    """`@torch.compiler.disable` or `torch.compiler.disable(fn)`: the function unchanged."""
    return fn if fn is not None else (lambda f: f)


def allow_in_graph(fn: Any) -> Any:
    return fn


def assume_constant_result(fn: Any) -> Any:
    return fn
