"""`Stream`: one request stream of a connection, what is owed to it and from it; `Listener`: what hears its request.

A stream's request body goes to its listener (`on_data`, `on_end`; `on_reset` when the stream or the connection
is lost; `on_abort` just before the server closes the connection itself). The connection keeps both flow-control
windows here: `send_window` (what the client lets us send) and `recv_window` (what it may still send us,
receive.py).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from serve.frontends.grpc.http2.frames import DEFAULT_WINDOW

INITIAL_STREAM_WINDOW = DEFAULT_WINDOW  # a new stream's receive window, before its first WINDOW_UPDATE grows it


class Listener(Protocol):
    def on_data(self, data: bytes) -> None: ...
    def on_end(self) -> None: ...
    def on_reset(self) -> None: ...
    def on_abort(self, reason: str) -> None:
        """The server closes the connection now (it stops, or evicts it): answer with `reason` if there is time."""


class Stream:
    __slots__ = ("buffered", "expected", "grown", "headers", "id", "last_data", "listener", "local_closed",
                 "may_idle", "pending", "received", "recv_window", "remote_closed", "send_window", "sent",
                 "trailers", "unacknowledged")  # fmt: skip

    def __init__(self, stream_id: int, headers: list[tuple[str, str]], send_window: int, now: float) -> None:
        self.id = stream_id
        self.headers = headers
        self.listener: Listener | None = None
        self.send_window = send_window
        self.recv_window = INITIAL_STREAM_WINDOW  # what the client may still send on it
        self.grown = False  # its receive window has grown to Limits.stream_window
        self.pending = bytearray()  # DATA payload waiting for window
        self.trailers: bytes | None = None  # a trailer block waiting for `pending` to go
        self.remote_closed = False
        self.local_closed = False
        self.unacknowledged = 0  # bytes consumed that no WINDOW_UPDATE has given back yet
        self.sent: asyncio.Event | None = None  # set when `pending` falls under PENDING_BYTES (made when awaited)
        self.buffered = 0  # body bytes its listener holds (what it said last)
        self.last_data = now  # when its request last made progress
        self.may_idle = False  # set by the listener while the request may rightly go quiet
        self.expected: int | None = None  # the request's content-length, when it declared one
        self.received = 0  # body bytes received
