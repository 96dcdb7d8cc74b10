"""`ServerConnection`: what an HTTP/2 server connection of serve does around its frame state machine, whoever
parses the frames (connection.py, serve's own; bench/h2_connection.py, the same on python-hyper's h2).

Around the frames, and the same for any state machine:
- Admission: the connection joins the process's OpenConnections when it is made (refused there, or evicted
  before it was made, it closes at once); `evict` and `abort` close it, each listener first answering why
  (`on_abort`).
- Reading in turns: at most FRAMES_PER_TURN frames are handled per turn of the event loop (`_read_frames` says
  when frames are left), the rest wait for the next turn with reading paused, so one connection cannot hold the
  loop that every other client shares. Reading also stops while the transport cannot take what we write (a
  client that sends PINGs and reads no acknowledgements).
- Time bounds (`tick`, called every second by the server): a header block or a frame other than DATA left
  unfinished past `header_timeout` ends the connection; a stream whose request is unfinished, and that may not
  idle, is reset (CANCEL) after `request_idle_timeout` without DATA; a connection that has not sent HTTP/2's
  preface within PREFACE_SECONDS is closed.
- Ending: a connection error sends GOAWAY and half-closes; what the peer still sends is dropped unread until the
  socket closes (LINGER_SECONDS, LINGER_BYTES), so the peer reads why instead of a reset. A graceful end (GOAWAY
  without error: shutdown, eviction, the idle cap) lingers the same way once its streams are done: a client whose
  next call crossed our GOAWAY reads it and retries that call on a new connection (the call's stream is above the
  GOAWAY's last stream), where closing at once would fail the call with a broken pipe. At most MAX_LINGERING
  connections of the process linger at once, since each holds a descriptor; past that one closes at once. A
  connection that received more than TRIM_AFTER_BYTES gives the C heap's free pages back when it closes (heap.py).
- Stream bookkeeping that does not depend on the frames: the receive windows and budget (receive.py), a writer's
  `drained`, a stream's end on either side, and `quiet_since` for eviction.

A subclass writes its opening frames (`_start`), reads frames (`_read_frames`, raising ConnectionError), and
writes resets, WINDOW_UPDATEs, the GOAWAY of a connection error and its output (`_send_reset`,
`_window_update_for`, `_write_error_goaway`, `_flush`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from serve.frontends.connections import OpenConnections
from serve.frontends.grpc.http2 import errors
from serve.frontends.grpc.http2.errors import ConnectionError, Http2Error
from serve.frontends.grpc.http2.flood import FloodGuard
from serve.frontends.grpc.http2.receive import Budget, ReceiveWindows
from serve.frontends.grpc.http2.stream import Listener, Stream
from serve.frontends.heap import TRIM_AFTER_BYTES, trim_soon

log = logging.getLogger(__name__)

PENDING_BYTES = 1 << 20  # a stream's DATA waiting for window before its writer is held
PREFACE_SECONDS = 10.0  # a connection that has not sent the whole preface by then is closed
FRAMES_PER_TURN = 512  # frames handled per turn of the event loop before the connection yields
LINGER_SECONDS, LINGER_BYTES = 2.0, 16 << 20  # after GOAWAY: how long, and how much, is read and dropped
MAX_LINGERING = 32  # connections of the process lingering at once


@dataclass(frozen=True)
class Limits:
    max_concurrent_streams: int = 256
    stream_window: int = 256 << 10
    connection_window: int = 16 << 20
    buffer_budget: int = 32 << 20  # bytes a connection's listeners may buffer before only the leader's window opens
    server_buffer_budget: int = 256 << 20  # the same for all connections of a server together
    max_idle_connections: int = 1000  # per server (native.Server): past it, the one idle longest is closed
    max_header_list_size: int = 16384
    header_timeout: float = 10.0  # seconds from a header block's first byte to its end
    request_idle_timeout: float = 30.0  # seconds an unfinished request that may not idle may go without DATA


class ServerConnection(asyncio.Protocol):
    lingering: int = 0  # connections of the process lingering now (ServerConnection.lingering)

    def __init__(self, on_request: Callable[[Any, Stream], Listener], limits: Limits | None = None,
                 budget: Budget | None = None, connections: OpenConnections | None = None) -> None:  # fmt: skip
        self.on_request = on_request
        self.limits = limits or Limits()
        self.windows = ReceiveWindows(self.limits, budget or Budget(), self._window_update_for)
        self.connections = connections  # the process's connections, which this one joins
        self.streams: dict[int, Stream] = {}
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self._buffer = bytearray()
        self._header_started: float | None = None  # when the header block or frame being read began
        self._received_total = 0  # DATA bytes received in all
        self._blocked: dict[int, Stream] = {}  # streams with DATA waiting for window, in the order they blocked
        self._flush_scheduled = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._paused = set[str]()  # why reading is paused: "write" (the transport is full), "turn" (frames left)
        self._draining = False
        self._ended = False  # GOAWAY sent and nothing left to do: what still arrives is dropped
        self._aborted = False
        self._lingered = 0
        self._lingers = False
        self._preface_timer: asyncio.TimerHandle | None = None
        self.flood = FloodGuard()
        self.closed = asyncio.Event()
        self.idle_since: float | None = time.monotonic()  # None while a stream is open
        self.active_at = self.idle_since  # when a request last made progress (for eviction)
        self.served = False  # it has answered a call (for eviction: those that never have go first)

    # ---- what a subclass provides --------------------------------------------------------------------------------

    def _start(self) -> None:
        """Write the connection's opening frames (SETTINGS and the connection window)."""
        raise NotImplementedError

    def _awaiting_preface(self) -> bool:
        raise NotImplementedError

    def _read_frames(self) -> bool:
        """Handle the whole frames in `_buffer`, at most FRAMES_PER_TURN: True when some are left for next turn.
        ConnectionError for one that ends the connection."""
        raise NotImplementedError

    def _send_reset(self, stream_id: int, code: int) -> None:
        raise NotImplementedError

    def _window_update_for(self, stream_id: int, increment: int) -> None:
        raise NotImplementedError

    def _write_error_goaway(self, exc: Http2Error) -> None:
        raise NotImplementedError

    def _flush(self) -> None:
        """Write what the connection has to send in one `transport.write`."""
        raise NotImplementedError

    def _dropped_unread(self) -> None:
        """After a connection error: forget what was read and not yet handled (the buffer is cleared already)."""

    # ---- asyncio.Protocol ----------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport
        if self._aborted or (self.connections is not None and not self.connections.opened(self)):
            transport.close()  # evicted before it was made, or every other connection is serving: no room for it
            return
        peer = transport.get_extra_info("peername")
        self.peer = f"ipv6:[{peer[0]}]:{peer[1]}" if peer and ":" in str(peer[0]) else f"ipv4:{peer[0]}:{peer[1]}"
        self._start()
        self._flush()
        self._preface_timer = asyncio.get_running_loop().call_later(PREFACE_SECONDS, self._preface_expired)

    def _preface_expired(self) -> None:
        if self._awaiting_preface():
            self._fail(ConnectionError(f"no HTTP/2 preface within {PREFACE_SECONDS:g} s"))

    def data_received(self, data: bytes) -> None:
        if self._ended:  # GOAWAY sent: dropped until the connection closes, at most LINGER_BYTES of it
            self._lingered += len(data)
            if self._lingered > LINGER_BYTES and self.transport is not None:
                self.transport.close()
            return
        self._buffer += data
        self._read()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None  # nothing more is written
        if self._lingers:
            self._lingers = False
            ServerConnection.lingering -= 1
        if self.connections is not None:
            self.connections.closed(self)
        if self._preface_timer is not None:
            self._preface_timer.cancel()
        for stream in list(self.streams.values()):
            self._forget(stream, notify=True)
        self._buffer = bytearray()  # a large read buffer goes back now, not when the last reference does
        if self._received_total > TRIM_AFTER_BYTES:
            trim_soon()  # what its calls buffered is freed by then: give the pages back (heap.py)
        self._writable.set()
        self.closed.set()

    def pause_writing(self) -> None:
        self._writable.clear()
        self._pause_reading("write")

    def resume_writing(self) -> None:
        self._writable.set()
        self._resume_reading("write")

    # ---- what listeners and the server call ----------------------------------------------------------------------

    def reset(self, stream: Stream, code: int = errors.CANCEL) -> None:
        if stream.id in self.streams:
            self._send_reset(stream.id, code)
            self._forget(stream, notify=False)

    def consumed(self, stream: Stream, count: int) -> None:
        """The listener took `count` body bytes: they go back to the peer's window (receive.py says when)."""
        if not stream.remote_closed and stream.id in self.streams:
            self.windows.consumed(stream, count)

    def buffered(self, stream: Stream, count: int) -> None:
        """The listener now holds `count` body bytes of the stream (0: none)."""
        self.windows.held_by_listener(stream, count)

    async def drained(self, stream: Stream) -> None:
        """Return once the transport's buffer is below its high-water mark and under PENDING_BYTES of the stream's
        DATA wait for window (or the stream or the connection is gone)."""
        await self._writable.wait()
        while len(stream.pending) > PENDING_BYTES and not stream.local_closed:
            if stream.sent is None:
                stream.sent = asyncio.Event()
            stream.sent.clear()
            await stream.sent.wait()

    def goaway(self) -> None:
        raise NotImplementedError

    def evict(self, limit: str = "max_connections") -> None:
        """End it now, the server needs the room: what is in flight (only stalled uploads: a connection serving a
        request is not evicted) is answered and reset, then GOAWAY, and the connection lingers (no descriptor
        counted against `limit` any more) until the peer closes."""
        log.info("HTTP/2 connection from %s evicted: too many connections open (%s)", self.peer, limit)
        self._end_streams(f"the server has too many connections open ({limit}) and closed this quiet one: retry "
                          "the call")  # fmt: skip
        if self.transport is None:
            self._aborted = True  # not made yet (accepted in the same burst): it closes as soon as it is
        self.goaway()

    def abort(self, reason: str = "the server is shutting down: retry the call") -> None:
        """Close now (the grace period ran out): each listener may answer with `reason`, then every stream still
        open is reset. One not yet made (accepted in the same burst) closes as soon as it is."""
        self._aborted = True
        self._end_streams(reason)
        self._flush()
        if self.transport is not None:
            self.transport.close()

    def _end_streams(self, reason: str) -> None:
        for stream in list(self.streams.values()):
            if stream.listener is not None:
                stream.listener.on_abort(reason)
            self.reset(stream)
            if stream.listener is not None:
                stream.listener.on_reset()

    def tick(self, now: float) -> None:
        """Called about every second: end what has waited past its time bound (see the module docstring)."""
        limits = self.limits
        if self._ended:
            return
        if self._header_started is not None and now - self._header_started > limits.header_timeout:
            self._fail(ConnectionError(f"a header block not finished within {limits.header_timeout:g} s",
                                       errors.NO_ERROR))  # fmt: skip
            return
        for stream in list(self.streams.values()):
            if (not stream.remote_closed and not stream.may_idle
                    and now - stream.last_data > limits.request_idle_timeout):  # fmt: skip
                log.info("HTTP/2 stream %d from %s reset: no request data for %g s", stream.id, self.peer,
                         limits.request_idle_timeout)  # fmt: skip
                self._send_reset(stream.id, errors.CANCEL)
                self._forget(stream, notify=True)
        self._flush()

    def quiet_since(self) -> float | None:
        """Since when the connection has done nothing for its client, or None while it serves a request (a stream
        whose request is whole and whose answer is not): the server evicts the quietest when it has too many."""
        if self.idle_since is not None:
            return self.idle_since
        if any(stream.remote_closed for stream in self.streams.values()):
            return None
        return self.active_at

    # ---- reading in turns ----------------------------------------------------------------------------------------

    def _read(self) -> None:
        try:
            more = self._read_frames()
        except ConnectionError as exc:
            self._fail(exc)
            return
        if more:  # frames left for the next turn: read nothing new meanwhile
            self._pause_reading("turn")
            asyncio.get_running_loop().call_soon(self._next_turn)
        self._flush()

    def _next_turn(self) -> None:
        self._resume_reading("turn")
        if self.transport is not None and not self._ended:
            self._read()

    def _pause_reading(self, why: str) -> None:
        if not self._paused and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()
        self._paused.add(why)

    def _resume_reading(self, why: str) -> None:
        self._paused.discard(why)
        if not self._paused and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    # ---- stream state --------------------------------------------------------------------------------------------

    def _end_remote(self, stream: Stream) -> None:
        stream.remote_closed = True
        if stream.listener is not None:
            stream.listener.on_end()
        if stream.local_closed:
            self._forget(stream, notify=False)

    def _close_local(self, stream: Stream) -> None:
        stream.local_closed = True
        self.served = True
        if stream.remote_closed:  # else answered before the request ended: forgotten when it ends (a client
            self._forget(stream, notify=False)  # whose message is still being sent fails on RST_STREAM, so none)

    def _forget(self, stream: Stream, notify: bool) -> None:
        stream.local_closed = stream.remote_closed = True
        stream.pending.clear()
        if stream.sent is not None:
            stream.sent.set()
        self.streams.pop(stream.id, None)
        self._blocked.pop(stream.id, None)
        self.windows.forget(stream)
        if not self.streams:
            self.idle_since = time.monotonic()
        if notify and stream.listener is not None:
            stream.listener.on_reset()
        self._close_if_done()

    # ---- ending --------------------------------------------------------------------------------------------------

    def _fail(self, exc: Http2Error) -> None:
        """GOAWAY saying why, then close. The socket is half-closed first and what the peer still sends is read
        and dropped for up to LINGER_SECONDS: closing with unread bytes would reset the connection, and the peer
        could lose the GOAWAY before reading it."""
        log.info("HTTP/2 connection from %s ended: %s", self.peer, exc)
        self._write_error_goaway(exc)
        self._flush()
        for stream in list(self.streams.values()):
            self._forget(stream, notify=True)
        self._linger()

    def _close_if_done(self) -> None:
        if self._draining and not self.streams and self.transport is not None and not self.transport.is_closing():
            self._flush()
            self._linger()

    def _linger(self) -> None:
        """Half-close, then drop what the peer still sends until it closes, for at most LINGER_SECONDS (module
        docstring); close at once where the transport cannot half-close (TLS) or MAX_LINGERING already linger."""
        if self._ended:
            return  # lingering already
        self._buffer.clear()
        self._dropped_unread()
        self._ended = True
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if not transport.can_write_eof() or ServerConnection.lingering >= MAX_LINGERING:
            transport.close()
            return
        try:
            transport.write_eof()
        except OSError:  # the peer is gone already
            transport.close()
            return
        self._lingers = True
        ServerConnection.lingering += 1
        self._paused.clear()
        transport.resume_reading()
        asyncio.get_running_loop().call_later(LINGER_SECONDS, transport.close)

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
