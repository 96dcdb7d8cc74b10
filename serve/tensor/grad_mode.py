"""Grad mode: whether operations record a graph (`no_grad`, `enable_grad`, `set_grad_enabled`).

The flag is per thread, as in PyTorch. Serving always runs under `no_grad`, where no graph node is
created and an operation costs only its arithmetic plus the wrapping of the result.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class _GradState(threading.local):
    enabled: bool = True


state = _GradState()


def is_grad_enabled() -> bool:
    return state.enabled


def _with_mode(func: F, mode: bool) -> F:
    """`func` running under grad mode `mode`, restored afterwards.

    A generator function gets the mode around each step, not just its creation, as in PyTorch.
    """
    if inspect.isgeneratorfunction(func):

        @functools.wraps(func)
        def generator(*args: Any, **kwargs: Any) -> Any:
            gen = func(*args, **kwargs)
            prev = state.enabled
            try:
                state.enabled = mode
                response = gen.send(None)
                while True:
                    state.enabled = prev  # the caller's mode while suspended
                    try:
                        request = yield response
                    except GeneratorExit:
                        prev, state.enabled = state.enabled, mode
                        gen.close()
                        raise
                    except BaseException as exc:
                        prev, state.enabled = state.enabled, mode
                        response = gen.throw(exc)
                    else:
                        prev, state.enabled = state.enabled, mode
                        response = gen.send(request)
            except StopIteration as stop:
                return stop.value
            finally:
                state.enabled = prev

        return generator  # type: ignore[return-value]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        prev = state.enabled
        state.enabled = mode
        try:
            return func(*args, **kwargs)
        finally:
            state.enabled = prev

    return wrapper  # type: ignore[return-value]


class set_grad_enabled:
    """Sets grad mode now; as a context manager, restores the previous mode on exit; as a decorator,
    restores it at once and applies the mode to each call instead."""

    def __init__(self, mode: bool) -> None:
        self.prev = state.enabled
        self.mode = bool(mode)
        state.enabled = self.mode

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        state.enabled = self.prev

    def __call__(self, func: F) -> F:
        state.enabled = self.prev  # used as `@set_grad_enabled(False)`: the mode is for the calls only
        return _with_mode(func, self.mode)


class _GradModeContext:
    """Context manager and decorator setting grad mode to `mode`."""

    mode = True

    def __new__(cls, orig_func: Any = None) -> Any:
        # `@no_grad` without parentheses decorates directly, as PyTorch allows
        if orig_func is not None and callable(orig_func) and cls is not inference_mode:
            return cls()(orig_func)
        return super().__new__(cls)

    def __init__(self, orig_func: Any = None) -> None:
        if orig_func is not None and not callable(orig_func):
            raise TypeError(f"{type(self).__name__}() takes no arguments")

    def __enter__(self) -> None:
        self.prev = state.enabled
        state.enabled = self.mode

    def __exit__(self, *exc: object) -> None:
        state.enabled = self.prev

    def __call__(self, func: F) -> F:
        return _with_mode(func, self.mode)


class no_grad(_GradModeContext):
    """Context manager and decorator: operations inside record no graph."""

    mode = False


class enable_grad(_GradModeContext):
    """Context manager and decorator: re-enables recording inside a `no_grad` block."""

    mode = True


class inference_mode(_GradModeContext):
    """PyTorch's `inference_mode`: here the same as `no_grad` (no graph, no overhead).

    `inference_mode(False)` turns grad mode on, as PyTorch's does.
    """

    def __new__(cls, mode: Any = True) -> Any:
        if callable(mode):  # bare `@inference_mode`
            return cls()(mode)
        return object.__new__(cls)

    def __init__(self, mode: bool = True) -> None:
        self.mode = not mode
