"""The worker's continuous mode: each request goes to the handler as it arrives, and every request streams on its own.

A handler class that declares `continuous = True` gets no batches. The server sends each request alone, as soon
as it arrives, while others are still running (serve/management/continuous.py), and the worker's main thread hands
it over at once:

    handler.submit(request_id, data, context, emit)   # must return quickly: the work runs on the handler's threads
    handler.cancel(request_id)                         # the client went away, or its deadline passed
    emit(body, final=False, code=200)                  # from any thread; bytes, str, or a JSON value (dict, list)

`data` is what `handle` would get for the request (its "body"/"data" or form fields, decoded by TorchServe's rule)
plus "headers" (TorchServe's per-request header dict) unless an input has that name. Each emit is one chunk of the
request's streamed answer; the first fixes its status (`code`) and content type (by the body's kind: JSON compact,
one object per chunk). A request whose first emit is final is answered whole, not streamed. The first emit with
`code >= 400` and `final=True` is the request's error (`body` its message): the client gets that status if nothing
was sent yet, else its stream ends with the error. After the final emit, or a cancel, the request's emits are
dropped. An exception from `submit` answers that request only, as `handle`'s would its batch (answers.batch_error).

Messages (protocol.py framing): server -> worker `submit {id, kind, requests: [one]}` and `cancel {id}`; worker ->
server `chunk {id, responses: [one]}` and `result {id, responses: [one] | error | end}`, the batch messages' shapes
with one request each. A `batch` (a customized describe) still runs through the BatchRunner, on the same writer
lock: every frame is written whole, whichever thread writes it. The heartbeat thread is untouched.

Metrics: what the handler recorded in `context.metrics` (from any thread; the engine's records its token
counts and latencies there) travels with the next chunk/result frame as its "metrics" list, drained from the cache
(MetricsCache.drain) under the writer lock, so each record is sent once. An emit that is dropped (its request was
cancelled or already answered) still sends what was recorded, alone, as `metrics {metrics}`: a cancelled stream's
last records (its token counts, the engine's gauges falling back to 0) must reach the server too.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

from serve.batching.job import DESCRIBE
from serve.batching.json_values import DECODE_ERRORS, decode_error_text
from serve.errors import ArchiveError, InvalidInput
from serve.worker.answers import batch_error, error_body, serialize
from serve.worker.context import Context, handler_headers
from serve.worker.protocol import decode_batch, write_message_sync

log = logging.getLogger("serve.worker")


class Emit(Protocol):
    def __call__(self, body: Any, final: bool = False, code: int = 200) -> None: ...


def is_continuous(handler: Any) -> bool:
    return getattr(handler, "continuous", False) is True


def check_continuous(handler: Any, model_config: dict[str, Any]) -> None:
    """ArchiveError (the registration's fault, 400) when the model-config asks for `continuousBatching` and the
    handler cannot run that way, or when a handler declares `continuous` without the methods it needs."""
    asked = model_config.get("continuousBatching") in (True, "true", "True")
    name = type(handler).__name__
    if asked and not is_continuous(handler):
        raise ArchiveError(f"continuousBatching: true in the model-config needs a handler that declares "
                           f"`continuous = True` and implements submit(request_id, data, context, emit) and "
                           f"cancel(request_id); handler {name} does not declare it (see handlers/base_handler.py), "
                           "so remove continuousBatching or use a continuous handler")  # fmt: skip
    missing = [m for m in ("submit", "cancel") if not callable(getattr(handler, m, None))]
    if is_continuous(handler) and missing:
        raise ArchiveError(f"handler {name} declares continuous = True but has no {' or '.join(missing)} method: "
                           "implement submit(request_id, data, context, emit) and cancel(request_id)")  # fmt: skip


@dataclass
class _Request:
    job_id: int
    request_id: str
    started: bool = False  # a chunk was sent: the status is fixed
    done: bool = False  # answered or cancelled: later emits are dropped


class ContinuousRunner:
    """Hands requests to a continuous handler and writes what it emits; one writer lock for the channel."""

    def __init__(self, handler: Any, context: Context, channel: BinaryIO, max_response_size: int,
                 lock: threading.Lock) -> None:  # fmt: skip
        self.handler, self.context, self.channel = handler, context, channel
        self.max_response_size = max_response_size
        self._lock = lock
        self._active: dict[int, _Request] = {}  # by the server's job id
        self._request_ids: dict[str, int] = {}

    def handle(self, header: dict[str, Any], payloads: list[bytes]) -> None:
        if header.get("type") == "submit":
            self.submit(header, payloads)
        elif header.get("type") == "cancel":
            self.cancel(int(header["id"]))

    def submit(self, header: dict[str, Any], payloads: list[bytes]) -> None:
        job_id = int(header["id"])
        request = decode_batch(header, payloads)[0]
        state = _Request(job_id, request.request_id)
        try:
            inputs = request.handler_inputs(getattr(self.handler, "kserve_envelopes", False) is True)
        except (InvalidInput, *DECODE_ERRORS) as e:
            message = str(e) if isinstance(e, InvalidInput) else f"the input cannot be decoded: {decode_error_text(e)}"
            self._error(state, {"code": 400, "type": "BadRequestException", "message": message})
            return
        with self._lock:
            if request.request_id in self._request_ids:
                duplicate = {"code": 400, "type": "BadRequestException",
                             "message": f"request id {request.request_id} is already in flight"}  # fmt: skip
                self._write({"type": "result", "id": job_id, "error": duplicate})
                return
            self._active[job_id], self._request_ids[request.request_id] = state, job_id
        data = dict(inputs)
        data.setdefault("headers", handler_headers(request, header.get("kind") == DESCRIBE))
        emit: Emit = functools.partial(self._emit, state)
        try:
            self.handler.submit(request.request_id, data, self.context, emit)
        except Exception as e:  # this request's answer; the others run on
            self._error(state, batch_error(e))

    def cancel(self, job_id: int) -> None:
        with self._lock:
            state = self._active.get(job_id)
            if state is None:
                return
            self._forget(state)
        try:
            self.handler.cancel(state.request_id)
        except Exception:
            log.exception("handler.cancel(%r) failed", state.request_id)

    def _emit(self, state: _Request, body: Any, final: bool = False, code: int = 200) -> None:
        if final and code >= 400:
            self._error(state, {"code": code, "type": "PredictionException", "message": _text(body)})
            return
        bodies: list[bytes] = []
        desc = self._describe(body, code, bodies)
        with self._lock:
            if state.done:
                self._write({"type": "metrics"}, metrics_only=True)
                return
            if final and not state.started:
                self._write({"type": "result", "id": state.job_id, "responses": [desc]}, bodies)
            else:
                if not (final and not bodies[0]):  # an empty final emit only ends the stream
                    self._write({"type": "chunk", "id": state.job_id, "responses": [desc]}, bodies)
                state.started = True
                if final:
                    self._write({"type": "result", "id": state.job_id, "end": True})
            if final:
                self._forget(state)

    def _error(self, state: _Request, error: dict[str, Any]) -> None:
        with self._lock:
            if not state.done:
                self._write({"type": "result", "id": state.job_id, "error": error})
                self._forget(state)

    def _describe(self, body: Any, code: int, bodies: list[bytes]) -> dict[str, Any]:
        try:
            data, content_type = serialize(body, compact=True)
        except (TypeError, ValueError) as e:
            code, data, content_type = 503, error_body(503, f"Unsupported model output data type: {e}"), None
        if len(data) > self.max_response_size:
            message = (f"a chunk of {len(data)} bytes exceeds max_response_size ({self.max_response_size} bytes); "
                       "raise max_response_size in config.properties")  # fmt: skip
            code, data, content_type = 507, error_body(507, message), None
        bodies.append(data)
        return {"status": code, "headers": {}, "content_type": content_type or "application/json", "body": 0}

    def _forget(self, state: _Request) -> None:  # under the lock
        state.done = True
        self._active.pop(state.job_id, None)
        self._request_ids.pop(state.request_id, None)

    def _write(self, header: dict[str, Any], bodies: list[bytes] | None = None, metrics_only: bool = False) -> None:
        """Write one frame, with the metrics recorded since the last one (a metrics-only frame only if there are
        any); under the lock."""
        records = self.context.metrics.drain()
        if records:
            header["metrics"] = [r.to_dict() for r in records]
        if records or not metrics_only:
            write_message_sync(self.channel, header, bodies)


def _text(body: Any) -> str:
    if isinstance(body, (bytes, bytearray)):
        return bytes(body).decode("utf-8", "replace")
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    return body if isinstance(body, str) else json.dumps(body)
