"""RFC 9113 conformance of serve's HTTP/2 server, driven with raw frames: each case asserts the answer the RFC names.

Malformed requests (section 8.1.1) are stream errors PROTOCOL_ERROR: the stream is reset, the connection goes on
(a well-formed call on it is still answered). Frames that break the connection's state are connection errors:
GOAWAY with the RFC's code, then the connection closes.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

pytest.importorskip("h2")

from serve.frontends.grpc.http2 import errors
from serve.frontends.grpc.http2.lifecycle import Limits
from serve.frontends.grpc.native import Server
from tests.unit.frontends.grpc.http2.peers import ECHO, frame, message, raw_client, request_block, run

HEADERS, DATA, PRIORITY, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 1, 0, 2, 3, 4, 6, 7, 8
END_STREAM, END_HEADERS, PRIORITY_FLAG = 0x1, 0x4, 0x20
GRPC = (("content-type", "application/grpc"),)


def _block(fields: list[tuple[str, str]]) -> bytes:
    from serve.frontends.grpc.http2.hpack import encode

    return encode(fields)


REQUEST = [(":method", "POST"), (":scheme", "http"), (":path", ECHO), (":authority", "t")]
MALFORMED = {
    "cr-lf-in-a-value": REQUEST + [("x-note", "a\r\nb")],
    "nul-in-a-value": REQUEST + [("x-note", "a\x00b")],
    "value-with-leading-space": REQUEST + [("x-note", " a")],
    "uppercase-name": REQUEST + [("X-Upper", "v")],
    "space-in-a-name": REQUEST + [("x note", "v")],
    "empty-name": REQUEST + [("", "v")],
    "connection-header": REQUEST + [("connection", "keep-alive")],
    "transfer-encoding": REQUEST + [("transfer-encoding", "chunked")],
    "te-gzip": REQUEST + [("te", "gzip")],
    "unknown-pseudo-header": REQUEST + [(":foo", "bar")],
    "status-in-a-request": REQUEST + [(":status", "200")],
    "pseudo-after-regular": [(":method", "POST"), ("x-note", "v"), (":scheme", "http"), (":path", ECHO)],
    "pseudo-twice": REQUEST + [(":path", ECHO)],
    "missing-scheme": [(":method", "POST"), (":path", ECHO), (":authority", "t")],
    "missing-method": [(":scheme", "http"), (":path", ECHO)],
    "empty-path": [(":method", "POST"), (":scheme", "http"), (":path", "")],
    "content-length-not-a-number": REQUEST + [("content-length", "12a")],
}


def _run(test: Any, **kwargs: Any) -> None:
    run(test, **kwargs)


async def _still_answers(client: Any, stream: int) -> None:
    client.call(stream, b"alive")
    await client.until(lambda: client.ended(stream))
    assert client.headers[stream].get("grpc-status") == "0", client.headers[stream]


@pytest.mark.parametrize("fields", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_request_is_a_stream_error_protocol_error(fields: list[tuple[str, str]]) -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        client.writer.write(frame(HEADERS, END_HEADERS, 1, _block(fields + list(GRPC))) +
                            frame(DATA, END_STREAM, 1, message(b"x")))  # fmt: skip
        await client.until(lambda: client.ended(1))
        assert client.reset_code(1) == errors.PROTOCOL_ERROR
        assert 1 not in client.headers, "a malformed request was answered"
        await _still_answers(client, 3)

    _run(test)


@pytest.mark.parametrize("declared", [100, 3])
def test_a_body_that_differs_from_its_content_length_is_protocol_error(declared: int) -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        block = request_block(extra=(("content-length", str(declared)),))
        client.writer.write(frame(HEADERS, END_HEADERS, 1, block) + frame(DATA, END_STREAM, 1, message(b"0123456789")))
        await client.until(lambda: client.ended(1))
        assert client.reset_code(1) == errors.PROTOCOL_ERROR
        await _still_answers(client, 3)

    _run(test)


def test_a_matching_content_length_is_served() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        body = message(b"0123456789")
        block = request_block(extra=(("content-length", str(len(body))),))
        client.writer.write(frame(HEADERS, END_HEADERS, 1, block) + frame(DATA, END_STREAM, 1, body))
        await client.until(lambda: client.ended(1))
        assert client.headers[1]["grpc-status"] == "0"

    _run(test)


def test_trailers_with_a_pseudo_header_are_protocol_error() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        client.writer.write(frame(HEADERS, END_HEADERS, 1, request_block()) + frame(DATA, 0, 1, message(b"x")) +
                            frame(HEADERS, END_HEADERS | END_STREAM, 1, _block([(":path", "/x")])))  # fmt: skip
        await client.until(lambda: client.ended(1))
        assert client.reset_code(1) == errors.PROTOCOL_ERROR

    _run(test)


def _open_hold(stream: int = 1) -> bytes:
    """A call whose handler waits: its stream stays open (half-closed remote) while the test goes on."""
    return frame(HEADERS, END_HEADERS, stream, request_block()) + frame(DATA, END_STREAM, stream, message(b"hold"))


CONNECTION_ERRORS = {
    "ping-on-a-stream": (b"", frame(PING, 0, 1, b"12345678"), errors.PROTOCOL_ERROR),
    "ping-of-7-bytes": (b"", frame(PING, 0, 0, b"1234567"), errors.FRAME_SIZE_ERROR),
    "rst-stream-on-stream-0": (b"", frame(RST_STREAM, 0, 0, struct.pack(">I", 8)), errors.PROTOCOL_ERROR),
    "rst-stream-of-3-bytes": (_open_hold(), frame(RST_STREAM, 0, 1, b"\0\0\x08"), errors.FRAME_SIZE_ERROR),
    "goaway-on-a-stream": (b"", frame(GOAWAY, 0, 1, struct.pack(">II", 0, 0)), errors.PROTOCOL_ERROR),
    "rst-stream-on-an-idle-stream": (b"", frame(RST_STREAM, 0, 5, struct.pack(">I", 8)), errors.PROTOCOL_ERROR),
    "window-update-on-an-idle-stream": (b"", frame(WINDOW_UPDATE, 0, 5, struct.pack(">I", 100)),
                                        errors.PROTOCOL_ERROR),
    "priority-on-stream-0": (b"", frame(PRIORITY, 0, 0, struct.pack(">IB", 3, 16)), errors.PROTOCOL_ERROR),
    "a-lower-stream-id": (frame(HEADERS, END_HEADERS, 5, request_block()),
                          frame(HEADERS, END_HEADERS, 3, request_block()), errors.PROTOCOL_ERROR),
    "an-even-stream-id": (b"", frame(HEADERS, END_HEADERS, 2, request_block()), errors.PROTOCOL_ERROR),
    "settings-window-overflow": (_open_hold() + frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 2**31 - 1 - 65535)),
                                 frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 65536)), errors.FLOW_CONTROL_ERROR),
    "settings-window-above-2^31-1": (b"", frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 2**31)),
                                     errors.FLOW_CONTROL_ERROR),
    "data-on-stream-0": (b"", frame(DATA, 0, 0, b"x"), errors.PROTOCOL_ERROR),
    "data-on-an-idle-stream": (b"", frame(DATA, 0, 7, b"x"), errors.PROTOCOL_ERROR),
    "push-promise": (b"", frame(5, END_HEADERS, 1, b"\0\0\0\2"), errors.PROTOCOL_ERROR),
}  # fmt: skip


@pytest.mark.parametrize(("before", "frames", "code"), list(CONNECTION_ERRORS.values()), ids=list(CONNECTION_ERRORS))
def test_a_connection_error_is_goaway_with_the_rfcs_code(before: bytes, frames: bytes, code: int) -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        client.writer.write(before + frames)
        await client.until_closed()
        assert client.goaway_code() == code, client.frames

    _run(test)


def test_a_stream_depending_on_itself_is_a_stream_error() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        self_priority = struct.pack(">IB", 1, 16)  # HEADERS on stream 1 whose priority names stream 1
        client.writer.write(frame(HEADERS, END_HEADERS | PRIORITY_FLAG, 1, self_priority + request_block()))
        client.writer.write(frame(PRIORITY, 0, 3, struct.pack(">IB", 3, 16)))  # PRIORITY frame: stream 3 on itself
        await client.until(lambda: client.ended(1) and client.ended(3))
        assert client.reset_code(1) == client.reset_code(3) == errors.PROTOCOL_ERROR
        await _still_answers(client, 5)

    _run(test)


def test_data_on_a_closed_stream_is_stream_closed() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        client.call(1, b"done")
        await client.until(lambda: client.ended(1))
        assert client.headers[1]["grpc-status"] == "0"
        client.writer.write(frame(DATA, 0, 1, message(b"late")))
        await client.until(lambda: client.reset_code(1) is not None)
        assert client.reset_code(1) == errors.STREAM_CLOSED
        await _still_answers(client, 3)

    _run(test)


def test_headers_on_a_half_closed_remote_stream_is_stream_closed() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        client.writer.write(_open_hold(1) + frame(HEADERS, END_HEADERS | END_STREAM, 1, _block([("x-late", "1")])))
        await client.until(lambda: client.ended(1))
        assert client.reset_code(1) == errors.STREAM_CLOSED
        await _still_answers(client, 3)

    _run(test)


def test_late_frames_for_a_stream_we_reset_are_ignored() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        malformed = _block([*REQUEST, ("X-Upper", "v")])
        client.writer.write(frame(HEADERS, END_HEADERS, 1, malformed))  # reset by the server: PROTOCOL_ERROR
        await client.until(lambda: client.ended(1))
        # what the client had in flight for it before it read the reset: ignored, the connection goes on
        client.writer.write(frame(DATA, 0, 1, message(b"late")) + frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 9)) +
                            frame(RST_STREAM, 0, 1, struct.pack(">I", 8)))  # fmt: skip
        await _still_answers(client, 3)
        assert client.goaway_code() is None

    _run(test)


def test_a_goaway_from_the_client_lets_its_calls_finish() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        client.call(1, b"sleep0.2")
        client.writer.write(frame(GOAWAY, 0, 0, struct.pack(">II", 0, 0)))
        await client.until(lambda: client.ended(1))
        assert client.headers[1]["grpc-status"] == "0"
        await client.until_closed()

    _run(test)


def test_data_past_a_streams_window_is_flow_control_error() -> None:
    """Stream 1 leads (its window always opens); stream 3, over the budget, is not given its window back: the
    client that sends past its 64 KiB window anyway is cut off."""

    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        partial = (1 << 20).to_bytes(5, "big")  # a 1 MiB message announced, never finished
        client.writer.write(frame(HEADERS, END_HEADERS, 1, request_block()) + frame(DATA, 0, 1, partial + b"a" * 8000))
        client.writer.write(frame(HEADERS, END_HEADERS, 3, request_block()) + frame(DATA, 0, 3, partial) +
                            b"".join(frame(DATA, 0, 3, b"b" * 16384) for _ in range(5)))  # fmt: skip
        await client.until_closed()
        assert client.goaway_code() == errors.FLOW_CONTROL_ERROR

    _run(test, limits=Limits(buffer_budget=1000), max_receive_message_length=4 << 20)
