"""TorchServe's HTTP response shapes: pretty JSON bodies, the error body, a prediction's own status and headers.

JSON is written as TorchServe's Gson does: 2-space indent, `"key": value`, a trailing newline. Every error is
`{"code": status, "type": "<TorchServe exception name>", "message": "..."}` from the one table in
`frontends.errors`.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from serve.batching import InferenceResponse, json_values
from serve.errors import ServeError
from serve.frontends.errors import error_info

log = logging.getLogger(__name__)

JSON = "application/json"


def pretty_json(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json_values.dumps(obj, indent=2) + "\n", status_code=status, headers=headers, media_type=JSON)


def status_response(message: str, status: int = 200) -> Response:
    """Management answers: `{"status": "<message>"}`."""
    return pretty_json({"status": message}, status)


def error_response(exc: BaseException) -> Response:
    info = error_info(exc)
    headers = {}
    if info.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if info.status == 413:  # what is left of the body may be unread (body_limit.py): no further request fits
        headers["Connection"] = "close"
    if info.status >= 500 and not isinstance(exc, ServeError):
        log.error("unexpected error answering a request", exc_info=exc)
    return pretty_json(info.body(), info.status, headers)


async def serve_error_handler(request: Request, exc: Exception) -> Response:
    """The exception handler every app installs for ServeError (the middleware answers anything unexpected)."""
    return error_response(exc)


def inference_response(result: InferenceResponse) -> Response:
    """The handler's answer with its own status, headers and content type; chunked when it streams.

    No Content-Type is sent when the worker gave none (TorchServe sends one only when the handler sets it).
    """
    media_type = result.content_type or None
    if result.chunks is not None:
        return StreamingResponse(
            result.chunks, status_code=result.status, headers=result.headers, media_type=media_type
        )
    return Response(result.body, status_code=result.status, headers=result.headers, media_type=media_type)
