"""`torch.compiler`: serve compiles nothing through torch's compiler (its inference plan is made at load), so every
check says "not compiling" and every decorator keeps the eager function. `torch.compile` lives here too: it returns
the model (or function) unchanged for any backend and mode, with one warning, as TorchServe's Hugging Face handler
calls it with `backend="inductor"` from its model-config's `pt2` section: the worker then plans the eager model
itself (serve.compile, serve's own API, is the inference plan and is not this)."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def compile(model: Any = None, *, fullgraph: bool = False, dynamic: bool | None = None, backend: Any = "inductor",
            mode: str | None = None, options: dict[str, Any] | None = None, disable: bool = False) -> Any:  # fmt: skip
    """`torch.compile(model, backend=..., mode=...)` or `@torch.compile(...)`: the model unchanged (module doc)."""
    if model is None:
        return lambda fn: compile(fn, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                  options=options, disable=disable)  # fmt: skip
    if not disable:
        log.warning("torch.compile(backend=%r, mode=%r) returns %s unchanged on serve: the worker runs it through "
                    "serve's inference plan, made at load", backend, mode, type(model).__name__)  # fmt: skip
    return model


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
