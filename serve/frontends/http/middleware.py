"""The ASGI middleware every listener runs: request id, TorchServe's common headers, body size limit, metrics.

One pure-ASGI layer (cheaper than Starlette's BaseHTTPMiddleware on the inference path) that:
- drops trailing slashes from the path, as TorchServe's Java routing does (`/models/` is `/models`);
- gives each request an id (`request.state.request_id`, the `x-request-id` response header, the inference
  request's id);
- refuses a body over `max_request_size` with 413 (body_limit.py);
- adds TorchServe's no-cache headers to every response unless the handler set them;
- counts Requests2XX / 4XX / 5XX.

Decision: unlike TorchServe, an error answer does not close the connection (`connection: close` on every status
>= 400 would make clients reconnect after each 404 or 503); only a 413 closes it, because the unread body is left.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serve.frontends.http.body_limit import DRAIN_MAX_BYTES, content_length, drain, expects_continue, limited, too_large
from serve.frontends.http.responses import error_response
from serve.frontends.request_ids import new_request_id
from serve.metrics import ServerMetrics

NO_CACHE_HEADERS = (
    (b"pragma", b"no-cache"),
    (b"cache-control", b"no-cache; no-store, must-revalidate, private"),
    (b"expires", b"Thu, 01 Jan 1970 00:00:00 UTC"),
)


class ServeHTTPMiddleware:
    def __init__(self, app: ASGIApp, max_request_size: int, metrics: ServerMetrics) -> None:
        self.app = app
        self.limit = max_request_size
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if len(path) > 1 and path.endswith("/"):
            scope = {**scope, "path": path.rstrip("/") or "/"}
        request_id = new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        started: list[bool] = []
        send = answering(send, request_id, self.metrics, started)
        length = content_length(scope)
        if length is not None and length > self.limit:
            if not expects_continue(scope) and length <= DRAIN_MAX_BYTES:
                await drain(receive)
            await error_response(too_large(length, self.limit))(scope, receive, send)
            return
        try:
            await self.app(scope, limited(receive, self.limit), send)
        except Exception as exc:  # a bug, not a ServeError (those have their handler): still TorchServe's 500 body
            if started:
                raise
            await error_response(exc)(scope, receive, send)


def with_common_headers(headers: list[tuple[bytes, bytes]], request_id: str) -> list[tuple[bytes, bytes]]:
    """`headers` and, where the handler did not set them, `x-request-id` and TorchServe's no-cache headers."""
    present = {name.lower() for name, _ in headers}
    return headers + [(k, v) for k, v in ((b"x-request-id", request_id.encode()), *NO_CACHE_HEADERS)
                      if k not in present]  # fmt: skip


def answering(send: Send, request_id: str, metrics: ServerMetrics, started: list[bool] | None = None) -> Send:
    """`send` that adds the common headers to the response and counts it (Requests2XX/4XX/5XX); it appends to
    `started` once the response has begun."""

    async def send_with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            if started is not None:
                started.append(True)
            message = {**message, "headers": with_common_headers(list(message.get("headers", ())), request_id)}
            metrics.http_response(message["status"])
        await send(message)

    return send_with_headers
