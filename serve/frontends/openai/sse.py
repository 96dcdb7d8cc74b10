"""Server-Sent Events framing: `data: {json}\\n\\n` per event, `data: [DONE]\\n\\n` at the end (OpenAI's, vLLM's).

Decisions:
- JSON is compact (`,` and `:` without spaces) and UTF-8 (not \\u-escaped), as vLLM writes it.
- A failure once the stream has started (the status line is gone) is one error event, then `[DONE]`: OpenAI's SDK
  raises an APIError from an event holding `error`. Triton's generate_stream ends without `[DONE]` and words its
  error `{"error": message}`: both are parameters.
- The events iterator is closed whatever ends the stream (its last event, an error, the client going away: Starlette
  cancels the body's task), which closes the model's chunk streams and cancels the requests (wire.py).
- `X-Accel-Buffering: no` tells nginx-style proxies not to hold events back.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import StreamingResponse

from serve.errors import ServeError
from serve.frontends.openai.errors import error_of

log = logging.getLogger(__name__)

DONE = b"data: [DONE]\n\n"
MEDIA_TYPE = "text/event-stream"
HEADERS = {"X-Accel-Buffering": "no"}


def event(value: Any) -> bytes:
    return b"data: " + json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def openai_error_event(exc: BaseException) -> Any:
    return error_of(exc)[1]


async def framed(events: AsyncIterator[Any], done: bool = True,
                 error: Callable[[BaseException], Any] = openai_error_event) -> AsyncIterator[bytes]:  # fmt: skip
    try:
        async for value in events:
            yield event(value)
    except Exception as exc:  # the status is sent: the failure becomes an event
        if not isinstance(exc, ServeError):
            log.error("a stream failed after it started", exc_info=exc)
        yield event(error(exc))
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()
    if done:
        yield DONE


def streaming_response(events: AsyncIterator[Any], done: bool = True,
                       error: Callable[[BaseException], Any] = openai_error_event) -> StreamingResponse:  # fmt: skip
    return StreamingResponse(framed(events, done, error), media_type=MEDIA_TYPE, headers=HEADERS)
