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
- The connection's life around its frames (admission and eviction, reading in turns of at most FRAMES_PER_TURN
  frames, reading paused while writes back up, the header and request-idle timeouts, GOAWAY then linger on a
  connection error) is lifecycle.py's `ServerConnection`, which this class extends.
- Floods (flood.py): frames that do no work (PING, SETTINGS, WINDOW_UPDATE, PRIORITY, empty DATA and
  CONTINUATION, unknown types) beyond an allowance per second, and streams reset or failed beyond
  RESETS_PER_SECOND, end the connection with ENHANCE_YOUR_CALM.
- Malformed requests (section 8: request_headers.py) and frames that break a stream's state are stream errors;
  frames that break the connection's state are connection errors, each with the code the RFC names (5.1, 6.x).
  Frames for a stream we reset are ignored for as long as we remember it (the last RECENT_RESETS streams), as the
  RFC allows; DATA for a stream closed otherwise is STREAM_CLOSED.
- Sending: a stream's DATA waits, in order, for the peer's stream and connection windows; trailers follow the last
  of it. A writer of many messages awaits `connection.drained(stream)` (lifecycle.py), which holds it while the
  socket's buffer is full or more than PENDING_BYTES of the stream's DATA wait for window: a client that stops
  reading a stream stops its writer instead of growing our memory.
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

import logging
import struct
import time
from collections.abc import Callable

from serve.frontends.connections import OpenConnections
from serve.frontends.grpc.http2 import errors
from serve.frontends.grpc.http2.errors import ConnectionError, Http2Error, StreamError
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
from serve.frontends.grpc.http2.lifecycle import FRAMES_PER_TURN, PENDING_BYTES, Limits, ServerConnection
from serve.frontends.grpc.http2.receive import Budget
from serve.frontends.grpc.http2.request_headers import Malformed, check_request, check_trailers, content_length
from serve.frontends.grpc.http2.stream import INITIAL_STREAM_WINDOW, Listener, Stream

log = logging.getLogger(__name__)

RECENT_RESETS = 256  # streams we reset whose late frames are still ignored
SELF_DEPENDENT = 0x100  # beside a header block's HEADERS flags: its priority names its own stream


class Connection(ServerConnection):
    def __init__(self, on_request: Callable[[Connection, Stream], Listener], limits: Limits | None = None,
                 budget: Budget | None = None, connections: OpenConnections | None = None) -> None:  # fmt: skip
        super().__init__(on_request, limits, budget, connections)
        self.last_stream_id = 0
        self.decoder = Decoder()
        self._preface_seen = False
        self._header_block: tuple[int, int, bytearray] | None = None  # (stream id, HEADERS flags, fragments)
        self._peer_window = DEFAULT_WINDOW  # what the peer lets us send, connection-wide
        self._peer_initial_window = DEFAULT_WINDOW
        self._peer_frame_size = FRAME_SIZE
        self._recv_window = self.limits.connection_window  # what the peer may still send, connection-wide
        self._received_unacknowledged = 0
        self._reset_ids: dict[int, None] = {}  # the last RECENT_RESETS streams we reset, oldest first
        self._out = bytearray()

    def _start(self) -> None:
        limits = self.limits
        settings = [(MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams),
                    (INITIAL_WINDOW_SIZE, INITIAL_STREAM_WINDOW),
                    (MAX_HEADER_LIST_SIZE, limits.max_header_list_size), (ENABLE_PUSH, 0)]  # fmt: skip
        self._frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", key, value) for key, value in settings))
        self._frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", limits.connection_window - DEFAULT_WINDOW))

    def _awaiting_preface(self) -> bool:
        return not self._preface_seen

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

    def _window_update_for(self, stream_id: int, increment: int) -> None:
        self._frame(WINDOW_UPDATE, 0, stream_id, struct.pack(">I", increment))

    def goaway(self) -> None:
        """Stop taking streams (GOAWAY, no error); close once the streams already taken are done."""
        if self._draining or self.transport is None or self.transport.is_closing():
            return
        self._draining = True
        self._frame(GOAWAY, 0, 0, struct.pack(">II", self.last_stream_id, errors.NO_ERROR))
        self._flush()
        self._close_if_done()

    # ---- reading -------------------------------------------------------------------------------------------------

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

    def _write_error_goaway(self, exc: Http2Error) -> None:
        self._frame(GOAWAY, 0, 0, struct.pack(">II", self.last_stream_id, exc.code) + str(exc).encode()[:256])

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
        self._schedule_flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and self.transport is not None and not self.transport.is_closing() and not self._ended:
            self.transport.write(bytes(self._out))
        self._out.clear()
