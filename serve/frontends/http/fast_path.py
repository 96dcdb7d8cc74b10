"""`POST|PUT /predictions/...` answered by one pure-ASGI function, around the inference app's middleware stack and
router and Starlette's Request and Response objects.

Under load those layers took half of the server process's CPU per prediction (FastAPI's and Starlette's error,
telemetry and exception middleware and two routers first; then ServeHTTPMiddleware's closures, a Request and its
Headers, a Response and its header list). A prediction is answered here with the same steps and the same helpers,
in one pass over the request's headers:
- a request id, the `x-request-id` and TorchServe's no-cache headers, Requests2XX/4XX/5XX (middleware.py);
- `max_request_size`: a larger Content-Length is a 413 before any of the body is read, a chunked body is cut off at
  the limit (body_limit.py); a gzip or deflate body is inflated within the limit, and the answer compressed when
  the client accepts it (encoding.py);
- the inference key (auth.py), TorchServe's rules for the body (parsing.py), the handler's status and content type;
- TorchServe's error bodies for any failure (responses.py).
An answer the handler gave headers of its own, a streamed one, an error or a status without a body go through
Starlette's Response and the middleware's `answering`, as before. Everything else (ping, explanations, the API
description, docs, an unknown path, the OpenAI routes under `/predictions/{m}[/{v}]/v1/...`) goes to the app
unchanged. With CORS configured the wrapper is not used, so
CORS headers are never skipped.

The wrapper passes attribute reads through to the app (`app.state`, `app.openapi()`), so it stands in for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from serve.batching import InferenceResponse
from serve.frontends.dataplane import DataPlane
from serve.frontends.http.auth import INFERENCE, TokenAuth
from serve.frontends.http.body_limit import DRAIN_MAX_BYTES, drain, read_body, too_large
from serve.frontends.http.encoding import accepted, compress, compressed, decoded
from serve.frontends.http.middleware import answering, with_common_headers
from serve.frontends.http.parsing import parse_request
from serve.frontends.http.responses import error_response, inference_response
from serve.frontends.http.routers.predictions import METHODS
from serve.frontends.openai.routes import is_openai_path
from serve.frontends.request_ids import new_request_id

if TYPE_CHECKING:
    from serve.config import Settings

PREFIX = "/predictions/"
_METHODS = frozenset(METHODS)


class PredictionFastPath:
    def __init__(self, app: FastAPI, settings: Settings, dataplane: DataPlane, auth: TokenAuth) -> None:
        self.app = app
        self.limit = settings.max_request_size
        self.decode = settings.decode_input_request
        self.dataplane = dataplane
        self.metrics = dataplane.metrics
        self.auth = auth

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in _METHODS and scope["path"].startswith(PREFIX):
            params = _path_params(scope["path"])
            if params is not None and not (len(params) > 2 and is_openai_path(scope["path"])):
                await self._predict(scope, receive, send, params)
                return
        await self.app(scope, receive, send)

    async def _predict(self, scope: Scope, receive: Receive, send: Send, params: list[str]) -> None:
        request_id = new_request_id()
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        try:
            result = await self._infer(receive, headers, params, request_id)
        except Exception as exc:  # ServeError and bugs alike: TorchServe's error body, as the app's handlers give
            await error_response(exc)(scope, receive, answering(send, request_id, self.metrics))
            return
        if result is None:  # the client went away
            return
        status, body, accept = result.status, result.body, headers.get("accept-encoding")
        if result.headers or result.chunks is not None or status < 200 or status in (204, 304):
            response = compress(inference_response(result), accept)
            await response(scope, receive, answering(send, request_id, self.metrics))
            return
        head = []
        coding = accepted(accept) if body else None
        if coding is not None:
            body = compressed(body, coding)
        head.append((b"content-length", b"%d" % len(body)))
        if result.content_type:
            head.append((b"content-type", _content_type(result.content_type)))
        if coding is not None:
            head += [(b"content-encoding", coding.encode()), (b"vary", b"Accept-Encoding")]
        self.metrics.http_response(status)
        await send({"type": "http.response.start", "status": status, "headers": with_common_headers(head, request_id)})
        await send({"type": "http.response.body", "body": body})

    async def _infer(self, receive: Receive, headers: dict[str, str], params: list[str],
                     request_id: str) -> InferenceResponse | None:  # fmt: skip
        length = _content_length(headers.get("content-length"))
        if length is not None and length > self.limit:
            if headers.get("expect", "").lower() != "100-continue" and length <= DRAIN_MAX_BYTES:
                await drain(receive)
            raise too_large(length, self.limit)
        self.auth.check(INFERENCE, headers.get("authorization"))
        body = await read_body(receive, self.limit)
        if body is None:
            return None
        body = decoded(body, headers.get("content-encoding"), self.limit)
        url_path = params[2] if len(params) > 2 else ""
        job = parse_request(body, headers, request_id, url_path, False, self.decode)
        return await self.dataplane.predict(params[0], params[1] if len(params) > 1 else None, job)


def _content_length(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _content_type(media_type: str) -> bytes:
    """Starlette's Content-Type for a media type: text types name their charset."""
    if media_type.startswith("text/") and "charset=" not in media_type.lower():
        media_type += "; charset=utf-8"
    return media_type.encode("latin-1")


def _path_params(path: str) -> list[str] | None:
    """`[model_name, model_version?, url_path?]` of `/predictions/{model_name}[/{model_version}[/{url_path:path}]]`."""
    parts = path.rstrip("/")[len(PREFIX) :].split("/", 2)
    return parts if parts[0] else None
