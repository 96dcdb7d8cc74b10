"""`torch._assert`: the assert that survives symbolic tracing in torch; here a plain check."""

from __future__ import annotations

from typing import Any


def _assert(condition: Any, message: str) -> None:
    """Raise AssertionError(message) when `condition` is false (a one-element tensor counts by its value)."""
    if not bool(condition):
        raise AssertionError(message)
