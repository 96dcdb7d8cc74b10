"""Grad mode: whether operations record a graph (`no_grad`, `enable_grad`, `set_grad_enabled`).

The flag is per thread, as in PyTorch. Serving always runs under `no_grad`, where no graph node is
created and an operation costs only its arithmetic plus the wrapping of the result.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class _GradState(threading.local):
    enabled: bool = True


state = _GradState()


def is_grad_enabled() -> bool:
    return state.enabled


class set_grad_enabled:  # noqa: N801 - PyTorch's name
    """Sets grad mode now; as a context manager, restores the previous mode on exit."""

    def __init__(self, mode: bool) -> None:
        self.prev = state.enabled
        state.enabled = bool(mode)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        state.enabled = self.prev


class _GradModeContext:
    mode = True

    def __enter__(self) -> None:
        self.prev = state.enabled
        state.enabled = self.mode

    def __exit__(self, *exc: object) -> None:
        state.enabled = self.prev

    def __call__(self, func: F) -> F:
        mode = self.mode

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            prev = state.enabled
            state.enabled = mode
            try:
                return func(*args, **kwargs)
            finally:
                state.enabled = prev

        return wrapper  # type: ignore[return-value]


class no_grad(_GradModeContext):  # noqa: N801
    """Context manager and decorator: operations inside record no graph."""

    mode = False


class enable_grad(_GradModeContext):  # noqa: N801
    """Context manager and decorator: re-enables recording inside a `no_grad` block."""

    mode = True


class inference_mode(_GradModeContext):  # noqa: N801
    """PyTorch's `inference_mode`: here the same as `no_grad` (no graph, no overhead)."""

    def __init__(self, mode: bool = True) -> None:
        self.mode = not mode
