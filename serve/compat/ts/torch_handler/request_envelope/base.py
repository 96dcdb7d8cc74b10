"""`ts.torch_handler.request_envelope.base.BaseEnvelope`: TorchServe's envelope contract.

An envelope wraps a handler's `handle(data, context)`: `parse_input` turns the requests of an orchestrator's
format into the flat items the handler takes, and `format_output` turns the handler's results back. serve's
frontends speak KServe v1/v2 themselves (TorchServe's `service_envelope` setting is refused, see
serve/config/keys.py), so these classes are for handlers that wrap their own handle with one, as TorchServe
users' handlers do: `handle = KServeEnvelope(handler.handle).handle`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any


class BaseEnvelope(ABC):
    def __init__(self, handle_fn: Callable[[Any, Any], Any]) -> None:
        self._handle_fn = handle_fn
        self.context: Any = None

    def handle(self, data: Any, context: Any) -> Any:
        self.context = context
        if data:
            data = self.parse_input(data)
        results = self._handle_fn(data, context)
        if results:
            results = self.format_output(results)
        return results

    @abstractmethod
    def parse_input(self, data: Any) -> Any: ...

    @abstractmethod
    def format_output(self, data: Any) -> Any: ...


def payload(row: Any) -> Any:
    """A request's input as TorchServe reads it: `row.get("data") or row.get("body")`."""
    return (row.get("data") or row.get("body")) if isinstance(row, dict) else row
