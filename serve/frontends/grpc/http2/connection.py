"""One HTTP/2 server connection (RFC 9113) as an asyncio protocol: frames, streams and both ways of flow control.

It knows nothing of gRPC. A request stream's header block, once whole, goes to `on_request(connection, stream)`,
which returns the stream's `Listener`: its body arrives as `on_data(bytes)` and `on_end()`, a reset or a lost
connection as `on_reset()`. The listener answers with `send_headers`, `send_data` and `send_trailers`, and says
with `consumed(stream, n)` when it has taken n body bytes off the stream, which opens the stream's window again,
and with `buffered(stream, n)` how many of those bytes it still holds (a message not yet whole, messages its
handler has not read).

Decisions, and why:
- Receiving: each stream may have `stream_window` bytes unconsumed (256 KiB), the connection `connection_window`
  (16 MiB), so a client that sends faster than its calls read is held back by its own window, not by our memory.
  The connection window is given back as soon as a DATA frame is read; a stream's when its listener consumes the
  bytes, in WINDOW_UPDATEs of at least half a window. A listener consumes a message's bytes as they come (a
  message may be larger than the window), so what its calls buffer is bounded per connection: past
  `buffer_budget` bytes buffered by all its streams together, a stream's window is given back only to the
  connection's leader (the first stream that buffered, until it holds nothing), the others wait. The leader always
  advances, so a connection never stalls on its own budget, and a connection holds at most about the budget,
  one message and its streams' windows (256 x 256 KiB), whatever its client sends.
- Sending: a stream's DATA waits, in order, for the peer's stream and connection windows; trailers follow the last
  of it. A writer of many messages awaits `connection.drained(stream)`, which holds it while the socket's buffer
  is full or more than PENDING_BYTES of the stream's DATA wait for window: a client that stops reading a stream
  stops its writer instead of growing our memory.
- What a connection writes in one turn of the event loop goes out in one `transport.write`, so 32 answers that
  complete together cost one system call, not 32.
- Header blocks are encoded without indexing or Huffman coding (see hpack.py) and split into CONTINUATION frames
  at the peer's frame size. Server push is never used. Priority is read and ignored (RFC 9113 deprecates it).
- A connection that has not sent HTTP/2's preface within PREFACE_SECONDS is closed, so idle sockets that never
  speak cannot pile up.
- A client that resets more than RESETS_PER_SECOND of its own streams in one second ("rapid reset") is ended
  with ENHANCE_YOUR_CALM: each reset stream cost us a call.
- A frame that breaks the protocol for one stream resets that stream (RST_STREAM); one that breaks it for the
  connection (a bad preface, a bad header block, a frame too large, a flow-control overflow) ends the connection
  with GOAWAY saying why. Frames for streams we already closed are ignored, as the RFC allows after RST_STREAM.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from serve.frontends.grpc.http2 import errors
from serve.frontends.grpc.http2.errors import ConnectionError, Http2Error, StreamError
from serve.frontends.grpc.http2.hpack import Decoder, encode

log = logging.getLogger(__name__)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = (
    range(1, 7)
)
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65535
FRAME_SIZE = 16384  # the frame size we accept (the RFC's default): no frame of ours or a client's needs more
PENDING_BYTES = 1 << 20  # a stream's DATA waiting for window before its writer is held
RESETS_PER_SECOND = 200  # streams a client may reset per second before the connection is ended
PREFACE_SECONDS = 10.0  # a connection that has not sent the whole preface by then is closed
_HEAD = struct.Struct(">BHBBI")  # length (24 bits as byte + short), type, flags, stream id


@dataclass(frozen=True)
class Limits:
    max_concurrent_streams: int = 256
    stream_window: int = 256 << 10
    connection_window: int = 16 << 20
    buffer_budget: int = 32 << 20  # bytes all streams' listeners may buffer before only the leader's window opens
    max_idle_connections: int = 1000  # per server (native.Server): past it, the one idle longest is closed
    max_header_list_size: int = 16384


class Listener(Protocol):
    def on_data(self, data: bytes) -> None: ...
    def on_end(self) -> None: ...
    def on_reset(self) -> None: ...


class Stream:
    """One request stream: its headers, and what is owed to and from it."""

    __slots__ = ("buffered", "headers", "held", "id", "listener", "local_closed", "pending", "remote_closed",
                 "send_window", "sent", "trailers", "unacknowledged")  # fmt: skip

    def __init__(self, stream_id: int, headers: list[tuple[str, str]], send_window: int) -> None:
        self.id = stream_id
        self.headers = headers
        self.listener: Listener | None = None
        self.send_window = send_window
        self.pending = bytearray()  # DATA payload waiting for window
        self.trailers: bytes | None = None  # a trailer block waiting for `pending` to go
        self.remote_closed = False
        self.local_closed = False
        self.unacknowledged = 0  # bytes consumed that no WINDOW_UPDATE has given back yet
        self.sent: asyncio.Event | None = None  # set when `pending` falls under PENDING_BYTES (made when awaited)
        self.buffered = 0  # body bytes its listener holds (what it said last)
        self.held = 0  # bytes consumed but not given back to its window: the connection's budget is spent


class Connection(asyncio.Protocol):
    def __init__(self, on_request: Callable[[Connection, Stream], Listener], limits: Limits | None = None) -> None:
        self.on_request = on_request
        self.limits = limits or Limits()
        self.streams: dict[int, Stream] = {}
        self.last_stream_id = 0
        self.decoder = Decoder()
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self._buffer = bytearray()
        self._preface_seen = False
        self._header_block: tuple[int, int, bytearray] | None = None  # (stream id, HEADERS flags, fragments)
        self._peer_window = DEFAULT_WINDOW  # what the peer lets us send, connection-wide
        self._peer_initial_window = DEFAULT_WINDOW
        self._peer_frame_size = FRAME_SIZE
        self._received_unacknowledged = 0
        self._buffered = 0  # sum of the streams' `buffered`
        self._leader: Stream | None = None  # the stream whose window always opens (see the module docstring)
        self._holding: dict[int, Stream] = {}  # streams with `held` bytes, in the order they were held
        self._blocked: dict[int, Stream] = {}  # streams with DATA waiting for window, in the order they blocked
        self._out = bytearray()
        self._flush_scheduled = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._draining = False
        self._preface_timer: asyncio.TimerHandle | None = None
        self._resets, self._reset_window_start = 0, 0.0
        self.closed = asyncio.Event()
        self.idle_since: float | None = time.monotonic()  # None while a stream is open

    # ---- asyncio.Protocol ----------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport
        peer = transport.get_extra_info("peername")
        self.peer = f"ipv6:[{peer[0]}]:{peer[1]}" if peer and ":" in str(peer[0]) else f"ipv4:{peer[0]}:{peer[1]}"
        limits = self.limits
        settings = [(MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams),
                    (INITIAL_WINDOW_SIZE, limits.stream_window),
                    (MAX_HEADER_LIST_SIZE, limits.max_header_list_size), (ENABLE_PUSH, 0)]  # fmt: skip
        self._frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", key, value) for key, value in settings))
        self._frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", limits.connection_window - DEFAULT_WINDOW))
        self._flush()
        self._preface_timer = asyncio.get_running_loop().call_later(PREFACE_SECONDS, self._preface_expired)

    def _preface_expired(self) -> None:
        if not self._preface_seen:
            self._fail(ConnectionError(f"no HTTP/2 preface within {PREFACE_SECONDS:g} s"))

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        try:
            self._read_frames()
        except ConnectionError as exc:
            self._fail(exc)
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None  # nothing more is written
        if self._preface_timer is not None:
            self._preface_timer.cancel()
        for stream in list(self.streams.values()):
            self._forget(stream, notify=True)
        self._writable.set()
        self.closed.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

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
            self._frame(RST_STREAM, 0, stream.id, struct.pack(">I", code))
            self._forget(stream, notify=False)

    def consumed(self, stream: Stream, count: int) -> None:
        """The listener took `count` body bytes: give them back to the peer's window once half a window is owed, or
        hold them while the connection's buffer budget is spent and the stream is not the leader."""
        if stream.remote_closed or stream.id not in self.streams:
            return
        if self._buffered > self.limits.buffer_budget and stream is not self._leader:
            stream.held += count
            self._holding[stream.id] = stream
            return
        self._credit(stream, count)

    def buffered(self, stream: Stream, count: int) -> None:
        """The listener now holds `count` body bytes of the stream (0: none)."""
        self._buffered += count - stream.buffered
        stream.buffered = count
        if count and self._leader is None:
            self._leader = stream
        elif not count and self._leader is stream:
            self._leader = None
        if self._holding:
            self._release()

    def _release(self) -> None:
        """Give held bytes back to their windows while the budget allows; a new leader's always."""
        if self._leader is None:  # the first held stream that buffers: it can always finish its message
            self._leader = next((s for s in self._holding.values() if s.buffered), None)
        for stream in list(self._holding.values()):
            if self._buffered > self.limits.buffer_budget and stream is not self._leader:
                continue
            del self._holding[stream.id]
            held, stream.held = stream.held, 0
            self._credit(stream, held)

    def _credit(self, stream: Stream, count: int) -> None:
        if stream.remote_closed or stream.id not in self.streams:
            return
        stream.unacknowledged += count
        if stream.unacknowledged >= self.limits.stream_window // 2:
            self._frame(WINDOW_UPDATE, 0, stream.id, struct.pack(">I", stream.unacknowledged))
            stream.unacknowledged = 0
            self._schedule_flush()

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

    def abort(self) -> None:
        """Reset every stream and close now (the grace period ran out)."""
        for stream in list(self.streams.values()):
            self.reset(stream)
            if stream.listener is not None:
                stream.listener.on_reset()
        self._flush()
        if self.transport is not None:
            self.transport.close()

    # ---- reading -------------------------------------------------------------------------------------------------

    def _read_frames(self) -> None:
        buffer = self._buffer
        if not self._preface_seen:
            if len(buffer) < len(PREFACE):
                if not PREFACE.startswith(bytes(buffer)):
                    raise ConnectionError("not an HTTP/2 connection preface: this port speaks gRPC (HTTP/2)")
                return
            if buffer[: len(PREFACE)] != PREFACE:
                raise ConnectionError("not an HTTP/2 connection preface: this port speaks gRPC (HTTP/2)")
            del buffer[: len(PREFACE)]
            self._preface_seen = True
            if self._preface_timer is not None:
                self._preface_timer.cancel()
        pos = 0
        try:
            while len(buffer) - pos >= 9:
                high, low, kind, flags, stream_id = _HEAD.unpack_from(buffer, pos)
                length = (high << 16) | low
                if length > FRAME_SIZE:
                    raise ConnectionError(f"a frame of {length} bytes, above SETTINGS_MAX_FRAME_SIZE {FRAME_SIZE}",
                                          errors.FRAME_SIZE_ERROR)  # fmt: skip
                if len(buffer) - pos - 9 < length:
                    break
                payload = bytes(buffer[pos + 9 : pos + 9 + length])
                pos += 9 + length
                stream_id &= MAX_WINDOW
                try:
                    self._frame_received(kind, flags, stream_id, payload)
                except StreamError as exc:
                    self._stream_failed(exc)
                except ConnectionError:
                    raise
                except Exception as exc:  # a fault of ours on one stream (its listener): that stream only
                    log.exception("HTTP/2 frame of type %d on stream %d failed", kind, stream_id)
                    if not stream_id:
                        raise ConnectionError(f"internal error: {exc}", errors.INTERNAL_ERROR) from exc
                    self._stream_failed(StreamError(stream_id, f"internal error: {exc}", errors.INTERNAL_ERROR))
        finally:
            del buffer[:pos]

    def _frame_received(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
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
            if stream_id or len(payload) != 8:
                raise ConnectionError("a PING frame must be 8 bytes on stream 0", errors.FRAME_SIZE_ERROR)
            if not flags & ACK:
                self._frame(PING, ACK, 0, payload)
        elif kind == RST_STREAM:
            if len(payload) != 4 or not stream_id:
                raise ConnectionError("RST_STREAM must be 4 bytes on a stream", errors.FRAME_SIZE_ERROR)
            stream = self.streams.get(stream_id)
            if stream is not None:
                self._count_reset()
                self._forget(stream, notify=True)
        elif kind == GOAWAY:
            self._draining = True
            self._close_if_done()
        elif kind == PRIORITY:
            if len(payload) != 5:
                raise StreamError(stream_id, "a PRIORITY frame must be 5 bytes", errors.FRAME_SIZE_ERROR)
        elif kind == PUSH_PROMISE:
            raise ConnectionError("a client must not send PUSH_PROMISE")
        # any other type is an extension we do not know: ignored, as the RFC says

    def _count_reset(self) -> None:
        """Streams the peer opened and reset at once cost us a call each and it nothing ("rapid reset",
        CVE-2023-44487): past RESETS_PER_SECOND in one second the connection ends with ENHANCE_YOUR_CALM."""
        now = time.monotonic()
        if now - self._reset_window_start >= 1.0:
            self._reset_window_start, self._resets = now, 0
        self._resets += 1
        if self._resets > RESETS_PER_SECOND:
            raise ConnectionError(f"more than {RESETS_PER_SECOND} streams reset by the client in one second",
                                  errors.ENHANCE_YOUR_CALM)  # fmt: skip

    def _data(self, flags: int, stream_id: int, payload: bytes) -> None:
        if not stream_id:
            raise ConnectionError("a DATA frame on stream 0")
        self._received_unacknowledged += len(payload)  # padding included: it counts against the window too
        if self._received_unacknowledged >= self.limits.connection_window // 2:
            self._frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self._received_unacknowledged))
            self._received_unacknowledged = 0
        stream = self.streams.get(stream_id)
        if stream is None or stream.remote_closed:
            if stream_id > self.last_stream_id:
                raise ConnectionError(f"DATA on stream {stream_id}, which was never opened")
            if stream is not None:
                raise StreamError(stream_id, "DATA after the stream's END_STREAM", errors.STREAM_CLOSED)
            return  # a stream we closed or reset: ignored
        body = _unpad(flags, payload, stream_id)
        if body and stream.listener is not None:
            stream.listener.on_data(body)
        if len(payload) > len(body):  # padding is consumed at once
            self.consumed(stream, len(payload) - len(body))
        if flags & END_STREAM:
            self._end_remote(stream)

    def _headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if not stream_id:
            raise ConnectionError("a HEADERS frame on stream 0")
        fragment = _unpad(flags, payload, stream_id)
        if flags & PRIORITY_FLAG:
            fragment = fragment[5:]
        self._header_block = (stream_id, flags, bytearray(fragment))
        if flags & END_HEADERS:
            self._header_block_done()

    def _continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        if self._header_block is None:
            raise ConnectionError("a CONTINUATION frame without a header block before it")
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
            if not flags & END_STREAM:
                raise StreamError(stream_id, "a second header block without END_STREAM")
            if not stream.remote_closed:
                self._end_remote(stream)
            return
        if stream_id <= self.last_stream_id or not stream_id % 2:
            code = errors.STREAM_CLOSED if stream_id <= self.last_stream_id else errors.PROTOCOL_ERROR
            raise ConnectionError(
                f"HEADERS on stream {stream_id}: a client opens odd streams in increasing order", code
            )
        self.last_stream_id = stream_id
        stream = Stream(stream_id, fields, self._peer_initial_window)
        self.idle_since = None
        if self._draining or len(self.streams) >= self.limits.max_concurrent_streams:
            self._frame(RST_STREAM, 0, stream_id, struct.pack(">I", errors.REFUSED_STREAM))
            return
        size = sum(len(name) + len(value) + 32 for name, value in fields)
        self.streams[stream_id] = stream
        if size > self.limits.max_header_list_size:
            self.send_headers(stream, [(":status", "431")], end_stream=True)
            self._forget(stream, notify=False)
            return
        stream.listener = self.on_request(self, stream)
        if flags & END_STREAM:
            self._end_remote(stream)

    def _settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise ConnectionError("a SETTINGS frame on a stream")
        if flags & ACK:
            if payload:
                raise ConnectionError("a SETTINGS acknowledgement with a payload", errors.FRAME_SIZE_ERROR)
            return
        if len(payload) % 6:
            raise ConnectionError("a SETTINGS frame whose length is not a multiple of 6", errors.FRAME_SIZE_ERROR)
        for offset in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, offset)
            if key == INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ConnectionError(f"SETTINGS_INITIAL_WINDOW_SIZE {value} above 2^31-1",
                                          errors.FLOW_CONTROL_ERROR)  # fmt: skip
                delta, self._peer_initial_window = value - self._peer_initial_window, value
                for stream in self.streams.values():
                    stream.send_window += delta
            elif key == MAX_FRAME_SIZE:
                if not FRAME_SIZE <= value <= 2**24 - 1:
                    raise ConnectionError(f"SETTINGS_MAX_FRAME_SIZE {value} outside 16384..16777215")
                self._peer_frame_size = value
            elif key == ENABLE_PUSH and value > 1:
                raise ConnectionError(f"SETTINGS_ENABLE_PUSH {value}: only 0 or 1")
            # HEADER_TABLE_SIZE: our encoder uses no dynamic table; the others do not bind a server
        self._frame(SETTINGS, ACK, 0, b"")
        self._push_blocked()

    def _window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ConnectionError("a WINDOW_UPDATE frame must be 4 bytes", errors.FRAME_SIZE_ERROR)
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
            return
        if not increment:
            raise StreamError(stream_id, "a WINDOW_UPDATE of 0")
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            raise StreamError(stream_id, "the stream's send window above 2^31-1", errors.FLOW_CONTROL_ERROR)
        self._push(stream)

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
        self._holding.pop(stream.id, None)
        if stream.buffered or self._leader is stream:
            self.buffered(stream, 0)
        if not self.streams:
            self.idle_since = time.monotonic()
        if notify and stream.listener is not None:
            stream.listener.on_reset()
        self._close_if_done()

    def _stream_failed(self, exc: StreamError) -> None:
        log.info("HTTP/2 stream %d from %s reset: %s", exc.stream_id, self.peer, exc)
        self._frame(RST_STREAM, 0, exc.stream_id, struct.pack(">I", exc.code))
        stream = self.streams.get(exc.stream_id)
        if stream is not None:
            self._forget(stream, notify=True)

    def _fail(self, exc: Http2Error) -> None:
        log.info("HTTP/2 connection from %s ended: %s", self.peer, exc)
        self._frame(GOAWAY, 0, 0, struct.pack(">II", self.last_stream_id, exc.code) + str(exc).encode()[:256])
        self._flush()
        for stream in list(self.streams.values()):
            self._forget(stream, notify=True)
        if self.transport is not None:
            self.transport.close()

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
        length = len(payload)
        self._out += _HEAD.pack(length >> 16, length & 0xFFFF, kind, flags, stream_id)
        self._out += payload
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(bytes(self._out))
        self._out.clear()


def _unpad(flags: int, payload: bytes, stream_id: int) -> bytes:
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise ConnectionError(f"stream {stream_id}: padding as long as the frame")
    return payload[1 : len(payload) - payload[0]]
