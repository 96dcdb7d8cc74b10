"""What one abusive HTTP/2 client can make serve's gRPC server do (issue 24 items 1-3), and that other clients are
unhurt: floods of frames that do no work, a client that reads none of our answers, header blocks and request bodies
that never finish, more connections than the server keeps idle.

Each case asserts the server's answer (the RFC's GOAWAY code, a reset, a closed connection) and that a probe on
another connection is still answered. The per-turn bound and reading that stops while writes back up are checked
on a Connection driven directly, where what it did in one turn can be counted exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Any

import pytest

pytest.importorskip("h2")

from serve.frontends.grpc.http2 import errors, flood
from serve.frontends.grpc.http2.connection import Connection
from serve.frontends.grpc.http2.frames import PREFACE
from serve.frontends.grpc.http2.lifecycle import FRAMES_PER_TURN, Limits
from serve.frontends.grpc.native import Server
from tests.unit.frontends.grpc.http2.peers import (
    RecordingTransport,
    frame,
    message,
    raw_client,
    request_block,
    run,
)

DATA, HEADERS, PRIORITY, SETTINGS, PING, WINDOW_UPDATE, CONTINUATION = 0, 1, 2, 4, 6, 8, 9
END_STREAM, END_HEADERS = 0x1, 0x4


async def _probe(port: int) -> None:
    """A call on a new connection is answered."""
    client = await raw_client(port)
    client.call(1, b"probe")
    await client.until(lambda: client.ended(1))
    assert client.headers[1]["grpc-status"] == "0"
    client.writer.close()


FLOODS = {
    "empty-continuation": frame(HEADERS, 0, 1, request_block()) + frame(CONTINUATION, 0, 1, b"") * 20_000,
    "empty-data": frame(HEADERS, END_HEADERS, 1, request_block()) + frame(DATA, 0, 1, b"") * 20_000,
    "window-update-plus-1": frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1)) * 20_000,
    "settings": frame(SETTINGS, 0, 0, b"") * 20_000,
    "ping": frame(PING, 0, 0, b"12345678") * 20_000,
    "priority": frame(PRIORITY, 0, 3, struct.pack(">IB", 0, 16)) * 20_000,
    "unknown-type": frame(0x20, 0, 0, b"x") * 20_000,
}


@pytest.mark.parametrize("flood_bytes", list(FLOODS.values()), ids=list(FLOODS))
def test_a_flood_of_frames_that_do_no_work_ends_with_enhance_your_calm(flood_bytes: bytes) -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        client.writer.write(flood_bytes)
        await client.until_closed()
        assert client.goaway_code() == errors.ENHANCE_YOUR_CALM
        acks = sum(1 for kind, flags, _, _ in client.frames if kind in (SETTINGS, PING) and flags & 1)
        assert acks <= flood.IDLE_FRAMES_PER_SECOND + 2  # cut off within the allowance, not after 20,000
        await _probe(port)

    run(test)


def test_the_allowance_grows_with_the_work_done_for_the_client() -> None:
    """A client that acknowledges every DATA frame it reads with two WINDOW_UPDATEs is well behaved at any rate."""

    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        for stream in range(1, 2 * 600, 2):  # 600 calls, each answered by HEADERS, DATA and trailers
            client.call(stream, b"ok")
            client.writer.write(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 100)) * 3)
        await client.until(lambda: all(client.ended(s) for s in range(1, 2 * 600, 2)))
        assert client.goaway_code() is None

    run(test)


def test_a_header_block_trickled_past_the_header_timeout_ends_the_connection(monkeypatch: Any) -> None:
    from serve.frontends.grpc import native

    monkeypatch.setattr(native, "TICK_SECONDS", 0.1)

    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        await client.settled()
        block = request_block()
        client.writer.write(frame(HEADERS, 0, 1, block[:1]))
        for i in range(1, 40):  # one byte every 0.1 s: 4 s for the block, against a 0.5 s timeout
            await client.poll(0.1)
            if client.goaway_code() is not None or client.closed:
                break
            client.writer.write(frame(CONTINUATION, 0, 1, block[i : i + 1]))
        await client.until_closed()
        assert client.goaway_code() == errors.NO_ERROR, [p for k, _, _, p in client.frames if k == 7]
        await _probe(port)

    run(test, limits=Limits(header_timeout=0.5))


def test_a_frame_trickled_byte_by_byte_is_held_to_the_header_timeout(monkeypatch: Any) -> None:
    from serve.frontends.grpc import native

    monkeypatch.setattr(native, "TICK_SECONDS", 0.1)

    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        await client.settled()
        whole = frame(HEADERS, END_HEADERS, 1, request_block())
        for i in range(len(whole)):
            client.writer.write(whole[i : i + 1])
            await client.poll(0.1)
            if client.goaway_code() is not None or client.closed:
                break
        await client.until_closed()
        assert client.goaway_code() == errors.NO_ERROR, [p for k, _, _, p in client.frames if k == 7]

    run(test, limits=Limits(header_timeout=0.5))


def test_an_unfinished_request_that_stops_sending_is_reset(monkeypatch: Any) -> None:
    from serve.frontends.grpc import native

    monkeypatch.setattr(native, "TICK_SECONDS", 0.1)

    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        half = message(b"x" * 100)[:50]  # half a message, then silence
        client.writer.write(frame(HEADERS, END_HEADERS, 1, request_block()) + frame(DATA, 0, 1, half))
        client.writer.write(frame(HEADERS, END_HEADERS, 3, request_block()))  # headers, then silence
        await client.until(lambda: client.ended(1) and client.ended(3))
        assert client.reset_code(1) == client.reset_code(3) == errors.CANCEL
        client.call(5, b"still served")
        await client.until(lambda: client.ended(5))
        assert client.headers[5]["grpc-status"] == "0"

    run(test, limits=Limits(request_idle_timeout=0.5))


def test_a_streaming_call_between_messages_may_idle(monkeypatch: Any) -> None:
    from serve.frontends.grpc import native

    monkeypatch.setattr(native, "TICK_SECONDS", 0.1)

    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        path = "/test.Echo/Collect"  # client streaming: answers once the client ends
        client.writer.write(frame(HEADERS, END_HEADERS, 1, request_block(path)) + frame(DATA, 0, 1, message(b"a")))
        await asyncio.sleep(1.5)  # three times the idle timeout, at a message boundary
        assert not client.ended(1)
        client.writer.write(frame(DATA, END_STREAM, 1, message(b"b")))
        await client.until(lambda: client.ended(1))
        assert client.headers[1]["grpc-status"] == "0"

    run(test, limits=Limits(request_idle_timeout=0.5))


def test_idle_connections_past_the_limit_under_a_burst() -> None:
    """30 connections opened at once against max_idle_connections 5: the server keeps at most 5 of them open
    (each new one closes a different old one, not the same one still closing)."""

    async def test(connect: Any, server: Server, port: int) -> None:
        clients = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", port) for _ in range(30)))
        open_ = len(clients)
        for _, writer in clients:
            writer.write(PREFACE + frame(SETTINGS, 0, 0, b""))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while loop.time() < deadline:
            open_ = 0
            for reader, _ in clients:
                with contextlib.suppress(TimeoutError, ConnectionResetError):
                    await asyncio.wait_for(reader.read(65536), 0.05)
                open_ += not reader.at_eof()
            if open_ <= 5:
                break
        assert open_ <= 5, f"{open_} idle connections kept against a limit of 5"
        await _probe(port)

    run(test, limits=Limits(max_idle_connections=5))


def _acks(written: bytes) -> int:
    pos = count = 0
    while pos + 9 <= len(written):
        length, kind, flags = int.from_bytes(written[pos : pos + 3], "big"), written[pos + 3], written[pos + 4]
        count += kind == PING and flags & 1
        pos += 9 + length
    return count


def test_one_connection_handles_at_most_frames_per_turn_then_yields(monkeypatch: Any) -> None:
    monkeypatch.setattr(flood, "IDLE_FRAMES_PER_SECOND", 10**9)  # the bound under test, not the flood guard

    async def main() -> None:
        connection = Connection(lambda c, s: None)  # type: ignore[arg-type,return-value]
        transport = RecordingTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        connection.data_received(PREFACE + frame(PING, 0, 0, b"12345678") * (3 * FRAMES_PER_TURN))
        assert _acks(transport.written) == FRAMES_PER_TURN
        assert not transport.reading  # the rest waits for the next turn, reading nothing new meanwhile
        for _ in range(10):
            await asyncio.sleep(0)
        assert _acks(transport.written) == 3 * FRAMES_PER_TURN
        assert transport.reading

    asyncio.run(main())


def test_reading_stops_while_the_transport_cannot_take_our_writes() -> None:
    async def main() -> None:
        connection = Connection(lambda c, s: None)  # type: ignore[arg-type,return-value]
        transport = RecordingTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        connection.pause_writing()  # the client reads none of our acknowledgements
        assert not transport.reading
        connection.resume_writing()
        assert transport.reading

    asyncio.run(main())


def test_a_client_that_reads_no_ping_acknowledgements_is_not_read(monkeypatch: Any) -> None:
    """Against a real socket: the client's receive buffer is tiny and it never reads; the server stops reading its
    PINGs once its acknowledgements back up, so what it holds stays bounded."""
    monkeypatch.setattr(flood, "IDLE_FRAMES_PER_SECOND", 10**9)  # the backpressure under test, not the flood guard

    async def test(connect: Any, server: Server, port: int) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        _, writer = await asyncio.open_connection(sock=sock)
        writer.write(PREFACE + frame(SETTINGS, 0, 0, b""))
        pings = frame(PING, 0, 0, b"12345678") * 10_000  # 170 kB a write, 17 MB of acknowledgements owed in all
        for _ in range(100):
            writer.write(pings)
            try:
                await asyncio.wait_for(writer.drain(), 0.2)
            except TimeoutError:  # the server stopped reading us: its buffers are full
                break
        [connection] = list(server._connections)
        assert connection.transport is not None
        held = connection.transport.get_write_buffer_size() + len(connection._buffer)
        assert held < 4 << 20, f"{held} bytes held for a client that reads nothing"
        await _probe(port)
        writer.transport.abort()

    run(test)
