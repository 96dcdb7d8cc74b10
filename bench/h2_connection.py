"""`H2Connection`: serve's HTTP/2 server connection rebuilt on python-hyper's `h2` state machine, a measured
alternative to serve/frontends/grpc/http2/connection.py (issue 24 item 10), not product code.

    Server(connection_class=H2Connection)   # serve.frontends.grpc.native.Server: what grpc_echo.py's native-h2 runs
    .venv/bin/python bench/serve_h2.py start --foreground ...   # a whole serve whose gRPC servers run on it

It has the interface of serve's `Connection` that native.Server, call.Call and OpenConnections use (the same
constructor, `send_headers`/`send_data`/`send_trailers`/`reset`, `consumed`/`buffered`/`drained`, `goaway`/`evict`/
`abort`, `tick`, `quiet_since`, `idle_since`, `closed`, `streams`, `peer`; streams with `id`, `headers`, `may_idle`)
and the same protections, so that the comparison is of two HTTP/2 layers each with all of issue 24's hardening.

What h2 does: frames and stream states, HPACK, the RFC 9113 section 8 checks on request headers
(`validate_inbound_headers`), the receive windows (DATA past one is FLOW_CONTROL_ERROR), content-length, PING and
SETTINGS acknowledgements, and GOAWAY on any protocol error it finds. What is ours on top of it, because h2 has no
equivalent (the same code as connection.py: both extend http2/lifecycle.py's ServerConnection, or the same rules):
- Frames are counted before h2 sees them: each whole frame's head is read here, and at most FRAMES_PER_TURN frames
  are handed to h2 per turn of the event loop (the rest wait, reading paused); frames that do no work go through
  serve's FloodGuard (http2/flood.py) and resets through its reset count, ending the connection with
  ENHANCE_YOUR_CALM; a header block or a frame other than DATA left unfinished starts the header clock.
- Receive windows and the budget: serve's ReceiveWindows (http2/receive.py, with the server's shared `Budget`)
  decides every stream's WINDOW_UPDATE, which h2 sends (`increment_flow_control_window`); the connection's window
  is given back as DATA is read (h2's own `acknowledge_received_data` would give it back only as the listener
  consumes, and has no budget). A connection that received more than TRIM_AFTER_BYTES trims the C heap when it
  closes (serve/frontends/heap.py). Streams are serve's `Stream` (http2/stream.py); h2 keeps their send windows.
- From ServerConnection: admission and eviction, reading in turns, time bounds (`tick`), reading paused while the
  transport cannot take what we write, and a connection error that half-closes and lingers so that the peer reads
  the GOAWAY. One `transport.write` per turn.
- A graceful GOAWAY (`goaway`) is written here, beside h2: h2's `close_connection` moves its state machine to
  CLOSED, after which it neither sends the answers of the streams already taken nor reads their requests.

How h2's events map onto the listener interface: RequestReceived makes the Stream and calls `on_request` (refused
with REFUSED_STREAM while draining, answered 431 past `max_header_list_size`); DataReceived is `on_data`, its padding
consumed at once; StreamEnded is `on_end`; StreamReset (the client's RST_STREAM) is `on_reset` and one more reset for
the flood guard; WindowUpdated and RemoteSettingsChanged send the DATA waiting for window; ConnectionTerminated (the
client's GOAWAY) drains the connection.

Headers are decoded as latin-1, as serve's decoder does (one character per byte, never fails; with utf-8 a
non-UTF-8 value would raise UnicodeDecodeError out of `receive_data`). Outbound header validation and normalisation
are off: the call layer builds its headers (lowercase names, percent-encoded grpc-message, base64 `-bin` values).
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.frame_buffer
import h2.settings

from serve.frontends.connections import OpenConnections
from serve.frontends.grpc.http2 import errors
from serve.frontends.grpc.http2.frames import (
    CONTINUATION,
    DATA,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    FRAME_SIZE,
    GOAWAY,
    HEADERS,
    PREFACE,
    PUSH_PROMISE,
    head,
)
from serve.frontends.grpc.http2.lifecycle import FRAMES_PER_TURN, PENDING_BYTES, Limits, ServerConnection
from serve.frontends.grpc.http2.receive import Budget
from serve.frontends.grpc.http2.stream import INITIAL_STREAM_WINDOW, Listener, Stream

log = logging.getLogger(__name__)

_CONFIG = h2.config.H2Configuration(client_side=False, header_encoding="latin-1", validate_inbound_headers=True,
                                    validate_outbound_headers=False, normalize_outbound_headers=False)  # fmt: skip
_IDLE_KINDS = {2: "PRIORITY", 4: "SETTINGS", 6: "PING", 8: "WINDOW_UPDATE"}  # frames that never do work


class H2Connection(ServerConnection):
    def __init__(self, on_request: Callable[[Any, Stream], Listener], limits: Limits | None = None,
                 budget: Budget | None = None, connections: OpenConnections | None = None) -> None:  # fmt: skip
        super().__init__(on_request, limits, budget, connections)
        self.h2 = h2.connection.H2Connection(_CONFIG)
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.limits.max_concurrent_streams,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: INITIAL_STREAM_WINDOW,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: self.limits.max_header_list_size,
            h2.settings.SettingCodes.ENABLE_PUSH: 0})  # fmt: skip
        self.h2.decoder.max_header_list_size = 4 * self.limits.max_header_list_size  # past it: ENHANCE_YOUR_CALM
        self._preface_left = len(PREFACE)
        self._in_block = False  # a HEADERS without END_HEADERS was handed to h2, its CONTINUATIONs not all
        self._received_unacknowledged = 0

    def _start(self) -> None:
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(self.limits.connection_window - DEFAULT_WINDOW)

    def _awaiting_preface(self) -> bool:
        return self._preface_left > 0

    # ---- what listeners call -------------------------------------------------------------------------------------

    def send_headers(self, stream: Stream, fields: list[tuple[str, str]], end_stream: bool = False) -> None:
        if stream.local_closed:
            return
        try:
            self.h2.send_headers(stream.id, fields, end_stream=end_stream)
        except h2.exceptions.ProtocolError:  # the client reset it, or sent GOAWAY (h2 then sends nothing more)
            self._forget(stream, notify=True)
            return
        self.flood.sent += 1
        self._schedule_flush()
        if end_stream:
            self._close_local(stream)

    def send_data(self, stream: Stream, data: bytes) -> None:
        if stream.local_closed or not data:
            return
        if not stream.pending and len(data) <= min(self.h2.local_flow_control_window(stream.id),
                                                   self.h2.max_outbound_frame_size):  # fmt: skip
            self._data_frame(stream, data)  # the usual answer: one frame, sent at once
            return
        stream.pending += data
        self._push(stream)

    def send_trailers(self, stream: Stream, fields: list[tuple[str, str]]) -> None:
        if stream.local_closed:
            return
        if stream.pending:
            stream.trailers = fields  # type: ignore[assignment]  # h2 encodes them when they go
            return
        self.send_headers(stream, fields, end_stream=True)

    def _window_update_for(self, stream_id: int, increment: int) -> None:
        if self._ended or self.h2.state_machine.state == h2.connection.ConnectionState.CLOSED:
            return  # the connection is ending (h2 sends nothing once it has sent or read GOAWAY)
        try:
            self.h2.increment_flow_control_window(increment, stream_id)
        except h2.exceptions.StreamClosedError:  # h2 has seen its END_STREAM in the frames being read
            return
        self._schedule_flush()

    def goaway(self) -> None:
        """GOAWAY (no error) written beside h2, whose own would stop the streams already taken; close when done."""
        if self._draining or self._ended or self.transport is None or self.transport.is_closing():
            return
        self._draining = True
        self._flush()
        self.transport.write(head(GOAWAY, 0, 0, 8) + struct.pack(">II", self.h2.highest_inbound_stream_id, 0))
        self._close_if_done()

    # ---- reading -------------------------------------------------------------------------------------------------

    def _read_frames(self) -> bool:
        try:
            return self._feed()
        except h2.exceptions.ProtocolError as exc:  # h2 has queued its GOAWAY
            raise errors.ConnectionError(str(exc), int(getattr(exc, "error_code", errors.PROTOCOL_ERROR))) from None

    def _feed(self) -> bool:
        """Hand h2 the whole frames in the buffer, at most FRAMES_PER_TURN, counted by the flood guard first; True
        when frames are left for the next turn."""
        buffer = self._buffer
        if self._preface_left:  # h2 checks the preface as it comes
            preface = bytes(buffer[: self._preface_left])
            del buffer[: len(preface)]
            self._preface_left -= len(preface)
            self.h2.receive_data(preface)
            if self._preface_left:
                return False
            if self._preface_timer is not None:
                self._preface_timer.cancel()
        pos = frames = 0
        more = False
        while len(buffer) - pos >= 9:
            if frames == FRAMES_PER_TURN:
                more = True
                break
            length = int.from_bytes(buffer[pos : pos + 3], "big")
            kind, flags = buffer[pos + 3], buffer[pos + 4]
            if length > FRAME_SIZE:
                raise errors.ConnectionError(f"a frame of {length} bytes, above SETTINGS_MAX_FRAME_SIZE {FRAME_SIZE}",
                                             errors.FRAME_SIZE_ERROR)  # fmt: skip
            if len(buffer) - pos - 9 < length:
                break
            self._count(kind, flags, length)
            pos += 9 + length
            frames += 1
        if pos:
            chunk = bytes(buffer[:pos])
            del buffer[:pos]
            self._events(self.h2.receive_data(chunk))
        self._note_partial(buffer)
        return more

    def _count(self, kind: int, flags: int, length: int) -> None:
        """What FloodGuard counts of one frame, and whether a header block is still open after it."""
        if kind in _IDLE_KINDS:
            self.flood.idle_frame(_IDLE_KINDS[kind])
        elif kind == DATA:
            self._received_total += length  # counted as read: h2 drops a batch's events when it ends the connection
            if not length and not flags & END_STREAM:
                self.flood.idle_frame("an empty DATA frame")
        elif kind in (HEADERS, PUSH_PROMISE):
            self._in_block = not flags & END_HEADERS
        elif kind == CONTINUATION:
            if not length and not flags & END_HEADERS:
                self.flood.idle_frame("an empty CONTINUATION frame")
            self._in_block = not flags & END_HEADERS
        elif kind > CONTINUATION:
            self.flood.idle_frame(f"a frame of unknown type {kind}")

    def _note_partial(self, buffer: bytearray) -> None:
        partial = self._in_block or (len(buffer) > 0 and (len(buffer) < 4 or buffer[3] != DATA))
        if not partial:
            self._header_started = None
        elif self._header_started is None:
            self._header_started = time.monotonic()

    def _events(self, events: list[h2.events.Event]) -> None:
        for event in events:
            try:
                self._event(event)
            except errors.ConnectionError:
                raise
            except Exception as exc:  # a fault of ours on one stream (its listener): that stream only
                stream_id = getattr(event, "stream_id", 0)
                log.exception("HTTP/2 event %s on stream %d failed", type(event).__name__, stream_id)
                stream = self.streams.get(stream_id)
                if stream is None:
                    raise errors.ConnectionError(f"internal error: {exc}", errors.INTERNAL_ERROR) from exc
                self._send_reset(stream_id, errors.INTERNAL_ERROR)
                self._forget(stream, notify=True)

    def _event(self, event: h2.events.Event) -> None:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    def _ended(self, event: h2.events.StreamEnded) -> None:
        stream = self.streams.get(event.stream_id or 0)
        if stream is not None:
            self._end_remote(stream)

    def _window(self, event: h2.events.WindowUpdated | h2.events.RemoteSettingsChanged) -> None:
        stream = self.streams.get(getattr(event, "stream_id", 0) or 0)
        if stream is not None:
            self._push(stream)
        else:  # the connection's window, or the peer's initial window, changed
            self._push_blocked()

    def _reset_received(self, event: h2.events.StreamReset) -> None:
        self.flood.reset()
        stream = self.streams.get(event.stream_id or 0)
        if stream is not None:
            self._forget(stream, notify=True)

    def _terminated(self, event: h2.events.ConnectionTerminated) -> None:
        self._draining = True
        self._close_if_done()

    def _request(self, event: h2.events.RequestReceived) -> None:
        now = time.monotonic()
        stream_id = event.stream_id
        if self._draining:
            self._send_reset(stream_id, errors.REFUSED_STREAM)
            return
        headers: list[tuple[str, str]] = event.headers  # type: ignore[assignment]  # str: header_encoding is set
        stream = Stream(stream_id, headers, 0, now)  # its send window is h2's
        self.streams[stream_id] = stream
        self.windows.opened(stream)
        self.idle_since, self.active_at = None, now
        if sum(len(name) + len(value) + 32 for name, value in headers) > self.limits.max_header_list_size:
            self.send_headers(stream, [(":status", "431")], end_stream=True)
            self._forget(stream, notify=False)
            return
        stream.listener = self.on_request(self, stream)

    def _data(self, event: h2.events.DataReceived) -> None:
        size = event.flow_controlled_length or 0
        self._received_unacknowledged += size
        if self._received_unacknowledged >= self.limits.connection_window // 2:
            self.h2.increment_flow_control_window(self._received_unacknowledged)
            self._received_unacknowledged = 0
        stream = self.streams.get(event.stream_id or 0)
        if stream is None:  # answered and forgotten, or refused: its bytes go back to its window at once
            return
        self.windows.received(stream, size)  # h2 has checked the window; this keeps the budget's count of it
        body = event.data or b""
        if body:
            stream.last_data = self.active_at = time.monotonic()
            if stream.listener is not None:
                stream.listener.on_data(body)
        if size > len(body):
            self.consumed(stream, size - len(body))

    # ---- stream state --------------------------------------------------------------------------------------------

    def _send_reset(self, stream_id: int, code: int) -> None:
        try:
            self.h2.reset_stream(stream_id, code)
        except h2.exceptions.ProtocolError:  # h2 closed it already (both sides ended), or the connection
            return
        self._schedule_flush()

    def _write_error_goaway(self, exc: errors.Http2Error) -> None:
        if self.h2.state_machine.state != h2.connection.ConnectionState.CLOSED:  # else h2 queued its own
            self.h2.close_connection(exc.code, additional_data=str(exc).encode()[:256])

    def _dropped_unread(self) -> None:
        self.h2.incoming_buffer = h2.frame_buffer.FrameBuffer(server=True)  # the frames after the bad one: dropped

    # ---- writing -------------------------------------------------------------------------------------------------

    def _push(self, stream: Stream) -> None:
        pending = stream.pending
        while pending:
            size = min(len(pending), self.h2.local_flow_control_window(stream.id), self.h2.max_outbound_frame_size)
            if size <= 0:
                self._blocked[stream.id] = stream
                return
            if not self._data_frame(stream, bytes(pending[:size])):
                return
            del pending[:size]
            if stream.sent is not None and len(pending) <= PENDING_BYTES:
                stream.sent.set()
        self._blocked.pop(stream.id, None)
        if stream.trailers is not None:
            fields, stream.trailers = stream.trailers, None
            self.send_headers(stream, fields, end_stream=True)  # type: ignore[arg-type]

    def _data_frame(self, stream: Stream, data: bytes) -> bool:
        try:
            self.h2.send_data(stream.id, data)
        except h2.exceptions.ProtocolError:  # the client reset it, or sent GOAWAY (h2 then sends nothing more)
            self._forget(stream, notify=True)
            return False
        self.flood.sent += 1
        self._schedule_flush()
        return True

    def _push_blocked(self) -> None:
        for stream in list(self._blocked.values()):
            self._push(stream)

    def _flush(self) -> None:
        self._flush_scheduled = False
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing() and not self._ended:
            self.transport.write(data)


_HANDLERS: dict[type, Callable[[H2Connection, Any], None]] = {
    h2.events.DataReceived: H2Connection._data,
    h2.events.RequestReceived: H2Connection._request,
    h2.events.StreamEnded: H2Connection._ended,
    h2.events.WindowUpdated: H2Connection._window,
    h2.events.RemoteSettingsChanged: H2Connection._window,
    h2.events.StreamReset: H2Connection._reset_received,
    h2.events.ConnectionTerminated: H2Connection._terminated,
}  # the others (PING, SETTINGS acknowledged, PRIORITY, trailers, unknown frames) need nothing: h2 answered them
