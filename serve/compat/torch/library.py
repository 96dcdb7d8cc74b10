"""`torch.library`: registering custom operators. On serve a custom op is its Python function, called eagerly: the
decorators return it with the registration methods transformers' kernels call on it (`register_fake`,
`register_autograd`, `register_kernel`) as no-ops, since there is no dispatcher to register with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class CustomOp:
    """A function registered as an operator: calling it calls the function."""

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        self.fn, self.name = fn, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def register_fake(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn

    def register_kernel(self, device_types: Any, fn: Callable[..., Any] | None = None) -> Any:
        return fn if fn is not None else (lambda f: f)

    def register_autograd(self, backward: Callable[..., Any], setup_context: Callable[..., Any] | None = None) -> None:
        """serve serves: custom ops are not differentiated through torch.library."""


def custom_op(name: str, fn: Callable[..., Any] | None = None, *, mutates_args: Any = (), device_types: Any = None,
              schema: str | None = None) -> Any:  # fmt: skip
    """`@torch.library.custom_op("ns::name", mutates_args=())`: the function as a CustomOp."""
    if fn is not None:
        return CustomOp(fn, name)
    return lambda f: CustomOp(f, name)


def register_fake(op: Any, fn: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    return fn if fn is not None else (lambda f: f)


def register_kernel(op: Any, device_types: Any, fn: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    return fn if fn is not None else (lambda f: f)


def register_autograd(op: Any, backward: Callable[..., Any], *, setup_context: Any = None, **kwargs: Any) -> None:
    """No autograd registration: serve serves."""


class Library:
    """`torch.library.Library(ns, kind)`: definitions are accepted and ignored (there is no dispatcher)."""

    def __init__(self, ns: str, kind: str, dispatch_key: str = "") -> None:
        self.ns, self.kind = ns, kind

    def define(self, schema: str, *args: Any, **kwargs: Any) -> str:
        return schema.split("(", 1)[0]

    def impl(self, name: Any, fn: Callable[..., Any], dispatch_key: str = "", **kwargs: Any) -> None:
        """Ignored: the Python function is what runs."""
