"""`max_request_size`: refuse a larger body with 413 without ever holding more than the limit in memory.

A body announced larger by its Content-Length is refused before any of it is read; a body without one (chunked)
is refused as soon as the bytes received pass the limit. Either way, what the client is still sending is read
and thrown away (up to `DRAIN_MAX_BYTES` and `DRAIN_MAX_SECONDS`) before the 413 goes out: closing a socket with
unread data makes the kernel reset the connection, and the client would see a reset instead of the 413. A client
that sent `Expect: 100-continue` (curl does for large bodies) has not sent its body yet and gets the 413 at once.
"""

from __future__ import annotations

import asyncio

from starlette.types import Message, Receive, Scope

from serve.errors import RequestTooLarge

DRAIN_MAX_BYTES = 64 * 1024 * 1024
DRAIN_MAX_SECONDS = 5.0


def too_large(size: int | str, limit: int) -> RequestTooLarge:
    return RequestTooLarge(
        f"Request body of {size} bytes is larger than max_request_size ({limit} bytes); "
        "send a smaller body or raise max_request_size in config.properties"
    )


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value
    return None


def content_length(scope: Scope) -> int | None:
    value = header(scope, b"content-length")
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def expects_continue(scope: Scope) -> bool:
    return (header(scope, b"expect") or b"").lower() == b"100-continue"


async def drain(receive: Receive, budget: int = DRAIN_MAX_BYTES) -> None:
    """Read and discard the rest of the request body, within `budget` bytes and DRAIN_MAX_SECONDS."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DRAIN_MAX_SECONDS
    drained = 0
    while drained <= budget and (left := deadline - loop.time()) > 0:
        try:
            message = await asyncio.wait_for(receive(), left)
        except TimeoutError:
            return
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
        drained += len(message.get("body", b""))


def limited(receive: Receive, limit: int) -> Receive:
    """`receive` that raises RequestTooLarge (after draining the rest) once the body passes `limit` bytes."""
    received = 0

    async def receive_limited() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                if message.get("more_body", False):
                    await drain(receive)
                raise too_large(f"more than {limit}", limit)
        return message

    return receive_limited


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, read from `receive`; RequestTooLarge (after draining the rest) once it passes `limit`
    bytes; None when the client went away."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body = message.get("body", b"")
        size += len(body)
        more = message.get("more_body", False)
        if size > limit:
            if more:
                await drain(receive)
            raise too_large(f"more than {limit}", limit)
        parts.append(body)
        if not more:
            return parts[0] if len(parts) == 1 else b"".join(parts)
