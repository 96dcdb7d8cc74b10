"""`torch.utils.checkpoint` on serve: activation checkpointing saves memory in training by recomputing the
forward during backward. Serving runs without gradients, so `checkpoint` just calls the function (gradients, if
any, flow through the ordinary graph: same values, no memory saving)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def checkpoint(function: Callable[..., Any], *args: Any, use_reentrant: bool | None = None, **kwargs: Any) -> Any:
    """`function(*args, **kwargs)`; torch's checkpoint options (use_reentrant, preserve_rng_state, ...) are ignored."""
    for option in ("preserve_rng_state", "context_fn", "determinism_check", "debug"):
        kwargs.pop(option, None)
    return function(*args, **kwargs)


def checkpoint_sequential(functions: Any, segments: int, input: Any, use_reentrant: bool | None = None,
                          **kwargs: Any) -> Any:  # fmt: skip
    """Run the modules of `functions` (a Sequential or a list) in order on `input`."""
    modules = list(functions.children()) if hasattr(functions, "children") else list(functions)
    for module in modules:
        input = module(input)
    return input
