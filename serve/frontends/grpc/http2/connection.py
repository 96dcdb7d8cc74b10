"""One HTTP/2 server connection (RFC 9113) as an asyncio protocol: frames, streams and both ways of flow control.

It knows nothing of gRPC. A request stream's header block, once whole and well formed, goes to
`on_request(connection, stream)`, which returns the stream's `Listener`: its body arrives as `on_data(bytes)` and
`on_end()`, a reset or a lost connection as `on_reset()`. The listener answers with `send_headers`, `send_data`
and `send_trailers`, says with `consumed(stream, n)` when it has taken n body bytes off the stream, which opens the
stream's window again, with `buffered(stream, n)` how many of those bytes it still holds (a message not yet
whole, messages its handler has not read), and sets `stream.may_idle` while the stream may rightly go quiet (a
streaming call between two messages).

Decisions, and why:
- Receiving is bounded by what we advertise, whatever the client sends. DATA beyond a stream's or the
  connection's window is a connection error FLOW_CONTROL_ERROR (6.9.1). The streams' windows and the memory budget
  that bounds what their listeners buffer are receive.py's; the connection's window (`connection_window`) is given
  back as frames are read.
- Time bounds (`tick`, called every second by the server): a header block (HEADERS and its CONTINUATIONs) must be
  whole within `header_timeout` of its first byte (a block trickled byte by byte held a connection for ever); a
  stream whose request is unfinished, and that may not idle, must receive DATA at least every
  `request_idle_timeout`, else it is reset (CANCEL). A connection that has not sent HTTP/2's preface within
  PREFACE_SECONDS is closed.
- Floods (flood.py): frames that do no work (PING, SETTINGS, WINDOW_UPDATE, PRIORITY, empty DATA and
  CONTINUATION, unknown types) beyond an allowance per second, and streams reset or failed beyond
  RESETS_PER_SECOND, end the connection with ENHANCE_YOUR_CALM. While the transport cannot take what we write
  (its buffer is above the high-water mark: a client that sends PINGs and reads no acknowledgements), we stop
  reading from it. At most FRAMES_PER_TURN frames are handled per turn of the event loop; the rest wait for the
  next turn with reading paused, so one connection cannot hold the loop that every other client shares.
- A connection error sends GOAWAY and half-closes; what the peer still sends is dropped unread until the socket
  closes (LINGER_SECONDS), so the peer reads why instead of a reset.
- Malformed requests (section 8: request_headers.py) and frames that break a stream's state are stream errors;
  frames that break the connection's state are connection errors, each with the code the RFC names (5.1, 6.x).
  Frames for a stream we reset are ignored for as long as we remember it (the last RECENT_RESETS streams), as the
  RFC allows; DATA for a stream closed otherwise is STREAM_CLOSED.
- Sending: a stream's DATA waits, in order, for the peer's stream and connection windows; trailers follow the last
  of it. A writer of many messages awaits `connection.drained(stream)`, which holds it while the socket's buffer
  is full or more than PENDING_BYTES of the stream's DATA wait for window: a client that stops reading a stream
  stops its writer instead of growing our memory.
- What a connection writes in one turn of the event loop goes out in one `transport.write`, so 32 answers that
  complete together cost one system call, not 32.
- Header blocks are encoded without indexing or Huffman coding (see hpack.py) and split into CONTINUATION frames
  at the peer's frame size. Server push is never used. Priority is checked for self-dependency and otherwise
  ignored (RFC 9113 deprecates it).

Why not h2 (python-hyper's state machine; issue 24 item 10): bench/h2_connection.py is this connection rebuilt on
h2 with the same protections (flood.py, FRAMES_PER_TURN, receive.py's windows and budget, the time bounds), under
the same call layer. On an AMD EPYC with 2 CPUs at load average 13-16 it cost 4.0x our server CPU per echo rpc at
32 calls in flight (0.175 vs 0.044 ms) and 2.6x at 1 (0.322 vs 0.123 ms; `bench/grpc_echo.py --seconds 3
--rounds 5 [--concurrency 1] native native-h2`), and on a whole serve with the MLP 1.8x per `Predictions` rpc at 32
(0.314 vs 0.173 ms) and 1.4x at 1 (0.805 vs 0.569 ms; medians of 3 alternated `bench/grpc_rest.py --grpc-server
serve|serve-h2 --seconds 4 --rounds 3` runs, REST on the same servers 1.00x). Profiled, 93% of that layer's time is
in h2, hpack, hyperframe and what they call, 7% in the wrapper. h2 also ends the whole connection for what the RFC
makes a stream error (a malformed request, a stream past SETTINGS_MAX_CONCURRENT_STREAMS) and stops answering the
calls in flight after a client's GOAWAY. The bar was 1.3x: ours stays. bench/RESULTS.md ("HTTP/2 layer: ours vs
h2") has the figures and the attacks on both.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from serve.frontends.connections import OpenConnections
from serve.frontends.grpc.http2 import errors
from serve.frontends.grpc.http2.errors import ConnectionError, Http2Error, StreamError
from serve.frontends.grpc.http2.flood import FloodGuard
from serve.frontends.grpc.http2.frames import (
    ACK,
    CONTINUATION,
    DATA,
    DEFAULT_WINDOW,
    ENABLE_PUSH,
    END_HEADERS,
    END_STREAM,
    FRAME_SIZE,
    GOAWAY,
    HEAD,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    MAX_HEADER_LIST_SIZE,
    MAX_WINDOW,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    head,
    unpad,
)
from serve.frontends.grpc.http2.hpack import Decoder, encode
from serve.frontends.grpc.http2.receive import Budget, ReceiveWindows
from serve.frontends.grpc.http2.request_headers import Malformed, check_request, check_trailers, content_length
from serve.frontends.grpc.http2.stream import INITIAL_STREAM_WINDOW, Listener, Stream
from serve.frontends.heap import TRIM_AFTER_BYTES, trim_soon

log = logging.getLogger(__name__)

PENDING_BYTES = 1 << 20  # a stream's DATA waiting for window before its writer is held
PREFACE_SECONDS = 10.0  # a connection that has not sent the whole preface by then is closed
FRAMES_PER_TURN = 512  # frames handled per turn of the event loop before the connection yields
RECENT_RESETS = 256  # streams we reset whose late frames are still ignored
LINGER_SECONDS, LINGER_BYTES = 2.0, 16 << 20  # after a connection error: how long, and how much, is read and dropped
SELF_DEPENDENT = 0x100  # beside a header block's HEADERS flags: its priority names its own stream


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


class Connection(asyncio.Protocol):
    def __init__(self, on_request: Callable[[Connection, Stream], Listener], limits: Limits | None = None,
                 budget: Budget | None = None, connections: OpenConnections | None = None) -> None:  # fmt: skip
        self.on_request = on_request
        self.limits = limits or Limits()
        self.windows = ReceiveWindows(self.limits, budget or Budget(), self._window_update_for)
        self.connections = connections  # the process's connections, which this one joins
        self.streams: dict[int, Stream] = {}
        self.last_stream_id = 0
        self.decoder = Decoder()
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self._buffer = bytearray()
        self._preface_seen = False
        self._header_block: tuple[int, int, bytearray] | None = None  # (stream id, HEADERS flags, fragments)
        self._header_started: float | None = None  # when the header block or frame being read began
        self._peer_window = DEFAULT_WINDOW  # what the peer lets us send, connection-wide
        self._peer_initial_window = DEFAULT_WINDOW
        self._peer_frame_size = FRAME_SIZE
        self._recv_window = self.limits.connection_window  # what the peer may still send, connection-wide
        self._received_unacknowledged = 0
        self._received_total = 0  # DATA bytes received in all
        self._blocked: dict[int, Stream] = {}  # streams with DATA waiting for window, in the order they blocked
        self._reset_ids: dict[int, None] = {}  # the last RECENT_RESETS streams we reset, oldest first
        self._out = bytearray()
        self._flush_scheduled = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._paused = set[str]()  # why reading is paused: "write" (the transport is full), "turn" (frames left)
        self._draining = False
        self._failed = False  # a connection error ended it: GOAWAY sent, what still arrives is dropped
        self._aborted = False
        self._lingered = 0
        self._preface_timer: asyncio.TimerHandle | None = None
        self.flood = FloodGuard()
        self.closed = asyncio.Event()
        self.idle_since: float | None = time.monotonic()  # None while a stream is open
        self.active_at = self.idle_since  # when a request last made progress (for eviction)

    # ---- asyncio.Protocol ----------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport
        if self._aborted or (self.connections is not None and not self.connections.opened(self)):
            transport.close()  # evicted before it was made, or every other connection is serving: no room for it
            return
        peer = transport.get_extra_info("peername")
        self.peer = f"ipv6:[{peer[0]}]:{peer[1]}" if peer and ":" in str(peer[0]) else f"ipv4:{peer[0]}:{peer[1]}"
        limits = self.limits
        settings = [(MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams),
                    (INITIAL_WINDOW_SIZE, INITIAL_STREAM_WINDOW),
                    (MAX_HEADER_LIST_SIZE, limits.max_header_list_size), (ENABLE_PUSH, 0)]  # fmt: skip
        self._frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", key, value) for key, value in settings))
        self._frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", limits.connection_window - DEFAULT_WINDOW))
        self._flush()
        self._preface_timer = asyncio.get_running_loop().call_later(PREFACE_SECONDS, self._preface_expired)

    def _preface_expired(self) -> None:
        if not self._preface_seen:
            self._fail(ConnectionError(f"no HTTP/2 preface within {PREFACE_SECONDS:g} s"))

    def data_received(self, data: bytes) -> None:
        if self._failed:  # GOAWAY sent: dropped until the connection closes, at most LINGER_BYTES of it
            self._lingered += len(data)
            if self._lingered > LINGER_BYTES and self.transport is not None:
                self.transport.close()
            return
        self._buffer += data
        self._read()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None  # nothing more is written
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

    # ---- what listeners call -------------------------------------------------------------------------------------

    def send_headers(self, stream: Stream, fields: list[tuple[str, str]], end_stream: bool = False) -> None:
        if stream.local_closed:
            return
        self._header_frames(stream.id, encode(fields), END_STREAM if end_stream else 0)
        if end_stream:
            self._close_local(stream)

    def send_data(self, stream: Stream, data: bytes) -> None:
        if stream.local_closed or not data:
            return
        if stream.pending or len(data) > min(stream.send_window, self._peer_window, self._peer_frame_size):
            stream.pending += data
            self._push(stream)
            return
        stream.send_window -= len(data)
        self._peer_window -= len(data)
        self._frame(DATA, 0, stream.id, data)

    def send_trailers(self, stream: Stream, fields: list[tuple[str, str]]) -> None:
        """The last header block, with END_STREAM, after whatever DATA is still waiting for window."""
        if stream.local_closed:
            return
        block = encode(fields)
        if stream.pending:
            stream.trailers = block
            return
        self._header_frames(stream.id, block, END_STREAM)
        self._close_local(stream)

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

    def _window_update_for(self, stream_id: int, increment: int) -> None:
        self._frame(WINDOW_UPDATE, 0, stream_id, struct.pack(">I", increment))

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
        """Stop taking streams (GOAWAY, no error); close once the streams already taken are done."""
        if self._draining or self.transport is None or self.transport.is_closing():
            return
        self._draining = True
        self._frame(GOAWAY, 0, 0, struct.pack(">II", self.last_stream_id, errors.NO_ERROR))
        self._flush()
        self._close_if_done()

    def evict(self) -> None:
        """Close now, the server needs the descriptor: GOAWAY, then end what is in flight."""
        log.info("HTTP/2 connection from %s evicted: too many connections open (max_connections)", self.peer)
        self.goaway()
        self.abort("the server has too many connections open and closed this quiet one: retry the call")

    def abort(self, reason: str = "the server is shutting down: retry the call") -> None:
        """Close now (the grace period ran out, or the connection is evicted): each listener may answer with
        `reason`, then every stream still open is reset. One not yet made (accepted in the same burst) closes as
        soon as it is."""
        self._aborted = True
        for stream in list(self.streams.values()):
            if stream.listener is not None:
                stream.listener.on_abort(reason)
            self.reset(stream)
            if stream.listener is not None:
                stream.listener.on_reset()
        self._flush()
        if self.transport is not None:
            self.transport.close()

    # ---- time bounds ---------------------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Called about every second: end what has waited past its time bound (see the module docstring)."""
        limits = self.limits
        if self._failed:
            return
        if self._header_started is not None and now - self._header_started > limits.header_timeout:
            self._fail(ConnectionError(f"a header block not finished within {limits.header_timeout:g} s",
                                       errors.NO_ERROR))  # fmt: skip
            return
        for stream in list(self.streams.values()):
            if (not stream.remote_closed and not stream.may_idle
                    and now - stream.last_data > limits.request_idle_timeout):  # fmt: skip
                self._stream_failed(StreamError(stream.id, f"no request data for {limits.request_idle_timeout:g} s",
                                                errors.CANCEL), count=False)  # fmt: skip
        self._flush()

    def quiet_since(self) -> float | None:
        """Since when the connection has done nothing for its client, or None while it serves a request (a stream
        whose request is whole and whose answer is not): the server evicts the quietest when it has too many."""
        if self.idle_since is not None:
            return self.idle_since
        if any(stream.remote_closed for stream in self.streams.values()):
            return None
        return self.active_at

    # ---- reading -------------------------------------------------------------------------------------------------

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
        if self.transport is not None:
            self._read()

    def _pause_reading(self, why: str) -> None:
        if not self._paused and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()
        self._paused.add(why)

    def _resume_reading(self, why: str) -> None:
        self._paused.discard(why)
        if not self._paused and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def _read_frames(self) -> bool:
        """Handle the whole frames in the buffer, at most FRAMES_PER_TURN: True when some are left for next turn."""
        buffer = self._buffer
        if not self._preface_seen:
            if len(buffer) < len(PREFACE):
                if not PREFACE.startswith(bytes(buffer)):
                    raise ConnectionError("not an HTTP/2 connection preface: this port speaks gRPC (HTTP/2)")
                return False
            if buffer[: len(PREFACE)] != PREFACE:
                raise ConnectionError("not an HTTP/2 connection preface: this port speaks gRPC (HTTP/2)")
            del buffer[: len(PREFACE)]
            self._preface_seen = True
            if self._preface_timer is not None:
                self._preface_timer.cancel()
        pos = frames = 0
        try:
            while len(buffer) - pos >= 9:
                if frames == FRAMES_PER_TURN:
                    return True
                high, low, kind, flags, stream_id = HEAD.unpack_from(buffer, pos)
                length = (high << 16) | low
                if length > FRAME_SIZE:
                    raise ConnectionError(f"a frame of {length} bytes, above SETTINGS_MAX_FRAME_SIZE {FRAME_SIZE}",
                                          errors.FRAME_SIZE_ERROR)  # fmt: skip
                if len(buffer) - pos - 9 < length:
                    break
                payload = bytes(buffer[pos + 9 : pos + 9 + length])
                pos += 9 + length
                frames += 1
                self._frame_received(kind, flags, stream_id & MAX_WINDOW, payload)
        finally:
            del buffer[:pos]
            self._note_partial(buffer)
        return False

    def _note_partial(self, buffer: bytearray) -> None:
        """Start the header clock when a header block or a frame other than DATA is incomplete; stop it when not."""
        partial = self._header_block is not None or (len(buffer) > 0 and (len(buffer) < 4 or buffer[3] != DATA))
        if not partial:
            self._header_started = None
        elif self._header_started is None:
            self._header_started = time.monotonic()

    def _frame_received(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        try:
            if self._header_block is not None and (kind != CONTINUATION or stream_id != self._header_block[0]):
                raise ConnectionError("a header block was interrupted by another frame before END_HEADERS")
            if kind == DATA:
                self._data(flags, stream_id, payload)
            elif kind == HEADERS:
                self._headers(flags, stream_id, payload)
            elif kind == CONTINUATION:
                self._continuation(flags, stream_id, payload)
            elif kind == SETTINGS:
                self._settings(flags, stream_id, payload)
            elif kind == WINDOW_UPDATE:
                self._window_update(stream_id, payload)
            elif kind == PING:
                self._ping(flags, stream_id, payload)
            elif kind == RST_STREAM:
                self._rst_stream(stream_id, payload)
            elif kind == GOAWAY:
                self._goaway(stream_id, payload)
            elif kind == PRIORITY:
                self._priority(stream_id, payload)
            elif kind == PUSH_PROMISE:
                raise ConnectionError("a client must not send PUSH_PROMISE")
            else:  # an extension we do not know: ignored, as the RFC says, and counted
                self.flood.idle_frame(f"a frame of unknown type {kind}")
        except StreamError as exc:
            self._stream_failed(exc)
        except ConnectionError:
            raise
        except Exception as exc:  # a fault of ours on one stream (its listener): that stream only
            log.exception("HTTP/2 frame of type %d on stream %d failed", kind, stream_id)
            if not stream_id:
                raise ConnectionError(f"internal error: {exc}", errors.INTERNAL_ERROR) from exc
            self._stream_failed(StreamError(stream_id, f"internal error: {exc}", errors.INTERNAL_ERROR), count=False)

    def _closed_stream(self, stream_id: int, what: str) -> StreamError | None:
        """A frame for a stream not open: ConnectionError for one never opened (idle), None for one we reset
        lately (its late frames are ignored), else the StreamError STREAM_CLOSED the caller raises or drops."""
        if stream_id > self.last_stream_id or not stream_id % 2:
            raise ConnectionError(f"{what} on stream {stream_id}, which was never opened")
        if stream_id in self._reset_ids:
            return None
        return StreamError(stream_id, f"{what} on stream {stream_id}, which is closed", errors.STREAM_CLOSED)

    def _data(self, flags: int, stream_id: int, payload: bytes) -> None:
        if not stream_id:
            raise ConnectionError("a DATA frame on stream 0")
        size = len(payload)  # padding included: it counts against the windows too
        if size > self._recv_window:
            raise ConnectionError(f"DATA of {size} bytes past the connection's window ({self._recv_window} bytes "
                                  "left)", errors.FLOW_CONTROL_ERROR)  # fmt: skip
        self._recv_window -= size
        self._received_total += size
        self._received_unacknowledged += size
        if self._received_unacknowledged >= self.limits.connection_window // 2:
            self._frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self._received_unacknowledged))
            self._recv_window += self._received_unacknowledged
            self._received_unacknowledged = 0
        stream = self.streams.get(stream_id)
        if stream is None:
            closed = self._closed_stream(stream_id, "DATA")
            if closed is not None:
                raise closed
            return
        if stream.remote_closed:
            raise StreamError(stream_id, "DATA after the stream's END_STREAM", errors.STREAM_CLOSED)
        self.windows.received(stream, size)
        body = unpad(flags, payload, stream_id)
        if not body and not flags & END_STREAM:
            self.flood.idle_frame("an empty DATA frame")
        stream.received += len(body)
        if stream.expected is not None and stream.received > stream.expected:
            raise StreamError(stream_id, f"a body longer than its content-length {stream.expected}")
        if body:
            stream.last_data = self.active_at = time.monotonic()
            if stream.listener is not None:
                stream.listener.on_data(body)
        if size > len(body):  # padding is consumed at once
            self.consumed(stream, size - len(body))
        if flags & END_STREAM:
            if stream.expected is not None and stream.received != stream.expected:
                raise StreamError(stream_id, f"a body of {stream.received} bytes, not its content-length "
                                  f"{stream.expected}")  # fmt: skip
            self._end_remote(stream)

    def _headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if not stream_id:
            raise ConnectionError("a HEADERS frame on stream 0")
        fragment = unpad(flags, payload, stream_id)
        if flags & PRIORITY_FLAG:
            if len(fragment) < 5:
                raise ConnectionError("a HEADERS frame too short for its priority fields", errors.FRAME_SIZE_ERROR)
            dependency, fragment = struct.unpack(">I", fragment[:4])[0] & MAX_WINDOW, fragment[5:]
            if dependency == stream_id:  # refused once the block is decoded (HPACK's state is shared)
                flags |= SELF_DEPENDENT
        self._header_block = (stream_id, flags, bytearray(fragment))
        if flags & END_HEADERS:
            self._header_block_done()

    def _continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        if self._header_block is None:
            raise ConnectionError("a CONTINUATION frame without a header block before it")
        if not payload and not flags & END_HEADERS:
            self.flood.idle_frame("an empty CONTINUATION frame")
        self._header_block[2].extend(payload)
        if len(self._header_block[2]) > 4 * self.limits.max_header_list_size:
            raise ConnectionError("a header block far above SETTINGS_MAX_HEADER_LIST_SIZE", errors.ENHANCE_YOUR_CALM)
        if flags & END_HEADERS:
            self._header_block_done()

    def _header_block_done(self) -> None:
        assert self._header_block is not None
        stream_id, flags, block = self._header_block
        self._header_block = None
        fields = self.decoder.decode(bytes(block))  # decoded even for a refused stream: HPACK state is shared
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers (a client that ends its body with a header block)
            self._trailers(stream, flags, fields)
            return
        if stream_id <= self.last_stream_id:
            if stream_id in self._reset_ids:
                return  # late trailers of a stream we reset
            code = errors.STREAM_CLOSED if stream_id == self.last_stream_id else errors.PROTOCOL_ERROR
            raise ConnectionError(f"HEADERS on stream {stream_id}: a client opens new streams in increasing order",
                                  code)  # fmt: skip
        if not stream_id % 2:
            raise ConnectionError(f"HEADERS on stream {stream_id}: a client opens odd-numbered streams")
        self.last_stream_id = stream_id
        if flags & SELF_DEPENDENT:
            raise StreamError(stream_id, "a stream that depends on itself")
        now = time.monotonic()
        self.idle_since, self.active_at = None, now
        if self._draining or len(self.streams) >= self.limits.max_concurrent_streams:
            self._send_reset(stream_id, errors.REFUSED_STREAM)
            self.idle_since = now if not self.streams else None
            return
        try:
            check_request(fields)
            expected = content_length(fields)
        except Malformed as exc:
            self.idle_since = now if not self.streams else None
            raise StreamError(stream_id, f"a malformed request: {exc}") from None
        stream = Stream(stream_id, fields, self._peer_initial_window, now)
        stream.expected = expected
        size = sum(len(name) + len(value) + 32 for name, value in fields)
        self.streams[stream_id] = stream
        self.windows.opened(stream)
        if size > self.limits.max_header_list_size:
            self.send_headers(stream, [(":status", "431")], end_stream=True)
            self._forget(stream, notify=False)
            return
        stream.listener = self.on_request(self, stream)
        if flags & END_STREAM:
            if expected:
                raise StreamError(stream_id, f"a request without a body, not its content-length {expected}")
            self._end_remote(stream)

    def _trailers(self, stream: Stream, flags: int, fields: list[tuple[str, str]]) -> None:
        if stream.remote_closed:
            raise StreamError(stream.id, "a header block after the stream's END_STREAM", errors.STREAM_CLOSED)
        if not flags & END_STREAM:
            raise StreamError(stream.id, "a second header block without END_STREAM")
        try:
            check_trailers(fields)
        except Malformed as exc:
            raise StreamError(stream.id, f"malformed trailers: {exc}") from None
        if stream.expected is not None and stream.received != stream.expected:
            raise StreamError(stream.id, f"a body of {stream.received} bytes, not its content-length {stream.expected}")
        self._end_remote(stream)

    def _settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise ConnectionError("a SETTINGS frame on a stream")
        if flags & ACK:
            if payload:
                raise ConnectionError("a SETTINGS acknowledgement with a payload", errors.FRAME_SIZE_ERROR)
            self.flood.idle_frame("a SETTINGS acknowledgement")
            return
        if len(payload) % 6:
            raise ConnectionError("a SETTINGS frame whose length is not a multiple of 6", errors.FRAME_SIZE_ERROR)
        self.flood.idle_frame("SETTINGS")
        for offset in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, offset)
            if key == INITIAL_WINDOW_SIZE:
                self._initial_window(value)
            elif key == MAX_FRAME_SIZE:
                if not FRAME_SIZE <= value <= 2**24 - 1:
                    raise ConnectionError(f"SETTINGS_MAX_FRAME_SIZE {value} outside 16384..16777215")
                self._peer_frame_size = value
            elif key == ENABLE_PUSH and value > 1:
                raise ConnectionError(f"SETTINGS_ENABLE_PUSH {value}: only 0 or 1")
            # HEADER_TABLE_SIZE: our encoder uses no dynamic table; the others do not bind a server
        self._frame(SETTINGS, ACK, 0, b"")
        self._push_blocked()

    def _initial_window(self, value: int) -> None:
        if value > MAX_WINDOW:
            raise ConnectionError(f"SETTINGS_INITIAL_WINDOW_SIZE {value} above 2^31-1", errors.FLOW_CONTROL_ERROR)
        delta, self._peer_initial_window = value - self._peer_initial_window, value
        for stream in self.streams.values():
            stream.send_window += delta
            if stream.send_window > MAX_WINDOW:
                raise ConnectionError(f"SETTINGS_INITIAL_WINDOW_SIZE {value} takes stream {stream.id}'s window "
                                      "above 2^31-1", errors.FLOW_CONTROL_ERROR)  # fmt: skip

    def _window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ConnectionError("a WINDOW_UPDATE frame must be 4 bytes", errors.FRAME_SIZE_ERROR)
        self.flood.idle_frame("WINDOW_UPDATE")
        increment = struct.unpack(">I", payload)[0] & MAX_WINDOW
        if not stream_id:
            if not increment:
                raise ConnectionError("a WINDOW_UPDATE of 0 on the connection")
            self._peer_window += increment
            if self._peer_window > MAX_WINDOW:
                raise ConnectionError("the connection's send window above 2^31-1", errors.FLOW_CONTROL_ERROR)
            self._push_blocked()
            return
        stream = self.streams.get(stream_id)
        if stream is None:
            self._closed_stream(stream_id, "WINDOW_UPDATE")  # a closed stream's late update is ignored
            return
        if not increment:
            raise StreamError(stream_id, "a WINDOW_UPDATE of 0")
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            raise StreamError(stream_id, "the stream's send window above 2^31-1", errors.FLOW_CONTROL_ERROR)
        self._push(stream)

    def _ping(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise ConnectionError("a PING frame on a stream")
        if len(payload) != 8:
            raise ConnectionError("a PING frame must be 8 bytes", errors.FRAME_SIZE_ERROR)
        self.flood.idle_frame("PING")
        if not flags & ACK:
            self._frame(PING, ACK, 0, payload)

    def _rst_stream(self, stream_id: int, payload: bytes) -> None:
        if not stream_id:
            raise ConnectionError("a RST_STREAM frame on stream 0")
        if len(payload) != 4:
            raise ConnectionError("a RST_STREAM frame must be 4 bytes", errors.FRAME_SIZE_ERROR)
        stream = self.streams.get(stream_id)
        if stream is None:
            self._closed_stream(stream_id, "RST_STREAM")  # a reset of a closed stream changes nothing
            return
        self.flood.reset()
        self._forget(stream, notify=True)

    def _goaway(self, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise ConnectionError("a GOAWAY frame on a stream")
        if len(payload) < 8:
            raise ConnectionError("a GOAWAY frame shorter than 8 bytes", errors.FRAME_SIZE_ERROR)
        self._draining = True
        self._close_if_done()

    def _priority(self, stream_id: int, payload: bytes) -> None:
        if not stream_id:
            raise ConnectionError("a PRIORITY frame on stream 0")
        if len(payload) != 5:
            raise StreamError(stream_id, "a PRIORITY frame must be 5 bytes", errors.FRAME_SIZE_ERROR)
        self.flood.idle_frame("PRIORITY")
        if struct.unpack(">I", payload[:4])[0] & MAX_WINDOW == stream_id:
            raise StreamError(stream_id, "a stream that depends on itself")

    # ---- stream state --------------------------------------------------------------------------------------------

    def _end_remote(self, stream: Stream) -> None:
        stream.remote_closed = True
        if stream.listener is not None:
            stream.listener.on_end()
        if stream.local_closed:
            self._forget(stream, notify=False)

    def _close_local(self, stream: Stream) -> None:
        stream.local_closed = True
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

    def _send_reset(self, stream_id: int, code: int) -> None:
        self._frame(RST_STREAM, 0, stream_id, struct.pack(">I", code))
        self._reset_ids[stream_id] = None
        if len(self._reset_ids) > RECENT_RESETS:
            del self._reset_ids[next(iter(self._reset_ids))]

    def _stream_failed(self, exc: StreamError, count: bool = True) -> None:
        """Reset the stream the peer broke; `count`: it was the peer's doing (a flood of them ends the connection)."""
        log.info("HTTP/2 stream %d from %s reset: %s", exc.stream_id, self.peer, exc)
        self._send_reset(exc.stream_id, exc.code)
        stream = self.streams.get(exc.stream_id)
        if stream is not None:
            self._forget(stream, notify=True)
        if count:
            self.flood.reset()

    def _fail(self, exc: Http2Error) -> None:
        """GOAWAY saying why, then close. The socket is half-closed first and what the peer still sends is read
        and dropped for up to LINGER_SECONDS: closing with unread bytes would reset the connection, and the peer
        could lose the GOAWAY before reading it."""
        log.info("HTTP/2 connection from %s ended: %s", self.peer, exc)
        self._frame(GOAWAY, 0, 0, struct.pack(">II", self.last_stream_id, exc.code) + str(exc).encode()[:256])
        self._flush()
        for stream in list(self.streams.values()):
            self._forget(stream, notify=True)
        self._buffer.clear()
        self._failed = True
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if not transport.can_write_eof():  # TLS: no half-close
            transport.close()
            return
        transport.write_eof()
        self._paused.clear()
        transport.resume_reading()
        asyncio.get_running_loop().call_later(LINGER_SECONDS, transport.close)

    def _close_if_done(self) -> None:
        if self._draining and not self.streams and self.transport is not None and not self.transport.is_closing():
            self._flush()
            self.transport.close()

    # ---- writing -------------------------------------------------------------------------------------------------

    def _push(self, stream: Stream) -> None:
        """Send as much of the stream's waiting DATA as the windows allow, then its trailers if all went."""
        pending = stream.pending
        while pending:
            size = min(len(pending), stream.send_window, self._peer_window, self._peer_frame_size)
            if size <= 0:
                self._blocked[stream.id] = stream
                return
            self._frame(DATA, 0, stream.id, bytes(pending[:size]))
            del pending[:size]
            stream.send_window -= size
            self._peer_window -= size
            if stream.sent is not None and len(pending) <= PENDING_BYTES:
                stream.sent.set()
        self._blocked.pop(stream.id, None)
        if stream.trailers is not None:
            block, stream.trailers = stream.trailers, None
            self._header_frames(stream.id, block, END_STREAM)
            self._close_local(stream)

    def _push_blocked(self) -> None:
        for stream in list(self._blocked.values()):
            self._push(stream)
            if self._peer_window <= 0:
                break

    def _header_frames(self, stream_id: int, block: bytes, flags: int) -> None:
        size = self._peer_frame_size
        if len(block) <= size:
            self._frame(HEADERS, flags | END_HEADERS, stream_id, block)
            return
        self._frame(HEADERS, flags, stream_id, block[:size])
        for start in range(size, len(block), size):
            last = start + size >= len(block)
            self._frame(CONTINUATION, END_HEADERS if last else 0, stream_id, block[start : start + size])

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        self._out += head(kind, flags, stream_id, len(payload))
        self._out += payload
        if kind <= HEADERS:  # DATA or HEADERS: work done for the client (acknowledgements do not count)
            self.flood.sent += 1
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and self.transport is not None and not self.transport.is_closing() and not self._failed:
            self.transport.write(bytes(self._out))
        self._out.clear()
