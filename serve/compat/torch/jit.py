"""`torch.jit` on serve: the decorators and checks model files use, and TorchScript calls run eagerly.

Decision: `script` and `trace` return the module (or function) unchanged, with one warning per process saying serve
runs it eagerly. A model file that scripts its model at construction keeps working, and the result is the same
because TorchScript preserves eager semantics. `load` (a TorchScript archive) is refused: there is no Python
source to run; the error says to archive the eager model file and a state_dict instead.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
_warned: list[bool] = []


def unused(fn: F) -> F:
    """The function itself (torch: compile a raising stub in its place)."""
    return fn


def ignore(drop: Any = False, **kwargs: Any) -> Any:
    """The function itself; usable as `@ignore` and `@ignore(drop=True)`."""
    if callable(drop):
        return drop
    return lambda fn: fn


def export(fn: F) -> F:
    """The function itself."""
    return fn


def _overload_method(fn: F) -> F:
    """The function itself: an overload signature for TorchScript; the undecorated definition after it wins."""
    return fn


def _overload(fn: F) -> F:
    """The function itself (see _overload_method)."""
    return fn


def is_scripting() -> bool:
    """False: serve never runs TorchScript."""
    return False


def is_tracing() -> bool:
    """False: serve never traces with torch.jit."""
    return False


def script(obj: Any, *args: Any, **kwargs: Any) -> Any:
    """The module or function unchanged; serve runs it eagerly (warned once)."""
    _warn("torch.jit.script")
    return obj


def trace(func: Any, example_inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
    """The module or function unchanged; serve runs it eagerly (warned once)."""
    _warn("torch.jit.trace")
    return func


def load(f: Any, map_location: Any = None, **kwargs: Any) -> Any:
    """Refused: TorchScript archives carry no Python source for serve to run."""
    raise NotImplementedError(
        f"torch.jit.load({f!r}): TorchScript models are not supported by serve; archive the eager model file "
        "(--model-file) with a state_dict checkpoint (--serialized-file, torch.save(model.state_dict(), ...)) instead"
    )


def _warn(name: str) -> None:
    if not _warned:
        _warned.append(True)
        warnings.warn(f"{name}: serve does not compile TorchScript; the module runs eagerly", stacklevel=3)
