"""`ReceiveWindows`: a connection's stream receive windows, kept within a budget of memory whatever the client sends.

A listener consumes a message's bytes as they come (a message may be larger than the window), so the windows alone
do not bound what its calls buffer. What bounds it:
- `reserved` = the bytes the connection's listeners hold (`buffered`) plus the window it has promised and not yet
  received (`promised`). A WINDOW_UPDATE that would take `reserved` past `buffer_budget` is not sent: the bytes
  wait on their stream (`holding`) until the listeners have handed over enough. The one exception is the
  connection's leader, the first stream that buffered, until it buffers nothing again: its window always opens, so
  it can finish its message, and no connection stalls on its own budget. A connection that buffers nothing may
  always open a window (what it promises is then at most its streams' windows).
- A stream starts with INITIAL_STREAM_WINDOW (64 KiB) and its first WINDOW_UPDATE grows it to `stream_window`
  (256 KiB) when the budget has room for that, so large uploads are not held to 64 KiB round trips.
- All connections of one server share a `Budget`: while its listeners together hold more than
  `server_buffer_budget`, only leaders' windows open on any connection.
So a connection holds at most about its budget, its new streams' initial windows (256 x 64 KiB) and the leader's
message, and the server about its budget plus, per connection, the initial windows and a message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from serve.frontends.grpc.http2 import errors
from serve.frontends.grpc.http2.errors import ConnectionError
from serve.frontends.grpc.http2.stream import INITIAL_STREAM_WINDOW, Stream

if TYPE_CHECKING:
    from serve.frontends.grpc.http2.lifecycle import Limits


class Budget:
    """Body bytes held by the listeners of every connection of one server, against `server_buffer_budget`."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held = 0


class ReceiveWindows:
    def __init__(self, limits: Limits, budget: Budget, send_update: Callable[[int, int], None]) -> None:
        self.limits, self.budget, self._send_update = limits, budget, send_update
        self.buffered = 0  # sum of the streams' `buffered`
        self.promised = 0  # sum of the open streams' receive windows
        self.leader: Stream | None = None  # the stream whose window always opens
        self.holding: dict[int, Stream] = {}  # streams with bytes to give back that wait for room, oldest first

    def opened(self, stream: Stream) -> None:
        self.promised += stream.recv_window

    def received(self, stream: Stream, size: int) -> None:
        """`size` bytes of DATA (padding included) arrived on the stream: ConnectionError past its window."""
        if size > stream.recv_window:
            raise ConnectionError(f"DATA of {size} bytes on stream {stream.id} past its window ({stream.recv_window} "
                                  "bytes left)", errors.FLOW_CONTROL_ERROR)  # fmt: skip
        stream.recv_window -= size
        self.promised -= size

    def consumed(self, stream: Stream, count: int) -> None:
        """The listener took `count` body bytes: give them back to the window once half a window is owed and the
        budget has room."""
        stream.unacknowledged += count
        if not self._update(stream):
            self.holding[stream.id] = stream

    def held_by_listener(self, stream: Stream, count: int) -> None:
        """The listener now holds `count` body bytes of the stream (0: none)."""
        change = count - stream.buffered
        self.buffered += change
        self.budget.held += change
        stream.buffered = count
        if count and self.leader is None:
            self.leader = stream
        elif not count and self.leader is stream:
            self.leader = None
        if self.holding and (change < 0 or self.leader is None):
            self._release()

    def forget(self, stream: Stream) -> None:
        """The stream is gone: what it promised and buffered no longer counts."""
        self.promised -= stream.recv_window
        stream.recv_window = 0
        self.holding.pop(stream.id, None)
        if stream.buffered or self.leader is stream:
            self.held_by_listener(stream, 0)

    def _release(self) -> None:
        if self.leader is None:  # the first waiting stream that buffers: it can always finish its message
            self.leader = next((s for s in self.holding.values() if s.buffered), None)
        for stream in list(self.holding.values()):
            if self._update(stream):
                del self.holding[stream.id]

    def _update(self, stream: Stream) -> bool:
        """Send the stream's WINDOW_UPDATE if it is due and allowed; False when it must wait for room."""
        limits = self.limits
        window = limits.stream_window if stream.grown else INITIAL_STREAM_WINDOW
        increment = stream.unacknowledged
        if increment < window // 2:
            return True  # not due yet: nothing waits
        growth = 0 if stream.grown else limits.stream_window - INITIAL_STREAM_WINDOW
        if stream is not self.leader:
            if not self._room(increment):
                return False
            if growth and not self._room(increment + growth):
                growth = 0
        elif growth and not self._room(increment + growth):
            growth = 0
        stream.grown = stream.grown or bool(growth)
        increment += growth
        stream.unacknowledged = 0
        stream.recv_window += increment
        self.promised += increment
        self._send_update(stream.id, increment)
        return True

    def _room(self, increment: int) -> bool:
        limits = self.limits
        if self.budget.held > limits.server_buffer_budget:
            return False
        return not self.buffered or self.buffered + self.promised + increment <= limits.buffer_budget
