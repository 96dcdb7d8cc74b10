"""What travels through a model's queue: the request as the frontends parsed it, the response a worker produced,
and the `Job` that pairs a request with the future its caller awaits.

No HTTP and no tensors here: `InferenceRequest.inputs` holds TorchServe's per-request dict (`{"body": ...}` or one
entry per form field) as the frontend received it (bytes); `handler_inputs()` is what the handler gets, decoded by
TorchServe's rule when `decode` is set (decoding.py), which the worker process applies.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from serve.batching.decoding import decode_value
from serve.batching.envelopes import PROTOCOL_HEADER, open_envelope

PREDICT = "predict"
DESCRIBE = "describe"  # a customized-describe job: it always travels alone, never batched


@dataclass
class InferenceRequest:
    """One inference request, protocol-free: its inputs by name, their content types, and its headers."""

    request_id: str
    inputs: dict[str, Any]
    content_types: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)  # lower-cased names
    explain: bool = False
    decode: bool = False  # TorchServe's decode_input_request: JSON and text inputs reach the handler parsed
    requested_version: str = ""  # the version the client named ("" = the default): the metrics' model_version

    def handler_inputs(self, envelopes: bool = False) -> dict[str, Any]:
        """The inputs as the handler receives them; `envelopes` (a handler that reads plain payloads) opens a
        KServe v1/v2 request's envelope (envelopes.py)."""
        if not self.decode:
            return self.inputs
        inputs = {name: decode_value(value, self.content_types.get(name)) if isinstance(value, (bytes, bytearray))
                  else value for name, value in self.inputs.items()}  # fmt: skip
        return open_envelope(inputs, self.headers.get(PROTOCOL_HEADER)) if envelopes else inputs


@dataclass
class InferenceResponse:
    """One request's answer. A streamed answer (a handler that yields) has `chunks`: every chunk of the body, in
    order, from an async iterator that raises the serving error if the stream breaks; `body` is then empty."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    chunks: AsyncIterator[bytes] | None = None


@dataclass
class Job:
    """A request waiting for its response; `future` is resolved (or failed with a ServeError) by a worker pool."""

    request: InferenceRequest
    future: asyncio.Future[InferenceResponse]
    kind: str = PREDICT
    enqueue_time: float = field(default_factory=time.monotonic)

    @classmethod
    def create(cls, request: InferenceRequest, kind: str = PREDICT) -> Job:
        """A job whose future belongs to the running event loop."""
        return cls(request, asyncio.get_running_loop().create_future(), kind)

    @property
    def done(self) -> bool:
        """Answered, failed, or given up by its caller (a client that went away cancels the future)."""
        return self.future.done()

    def succeed(self, response: InferenceResponse) -> None:
        if not self.future.done():
            self.future.set_result(response)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)
