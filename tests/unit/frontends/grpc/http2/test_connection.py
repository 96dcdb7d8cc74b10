"""serve's gRPC server (native.Server) at the HTTP/2 level, driven by python-hyper's `h2` client state machine.

grpc's own clients (the gRPC unit and integration tests) cover the calls they make; these cover what they rarely
do: windows smaller than a message both ways, protocol errors, a peer's reset and deadline, refused streams,
compressed and oversized messages, a graceful stop, and garbage that must hurt only its own connection.
"""

from __future__ import annotations

import asyncio
import gzip
import struct
from typing import Any

import grpc
import pytest

pytest.importorskip("h2")
import h2.errors
import h2.events

from serve.frontends.grpc.http2 import lifecycle
from serve.frontends.grpc.http2.frames import PREFACE
from serve.frontends.grpc.http2.hpack import encode
from serve.frontends.grpc.http2.lifecycle import Limits, ServerConnection
from serve.frontends.grpc.native import Server
from tests.unit.frontends.grpc.http2.peers import (
    ECHO,
    RELEASED,
    YIELDED,
    RawClient,
    frame,
    goaway_code,
    make_server,
    message,
    open_stream,
    pump,
    raw,
    raw_client,
    run,
)


def test_a_call_answers_headers_message_and_ok_trailers() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await connect()
        stream = await client.call(message(b"hello"))
        await client.until(client.ended(stream))
        assert client.body(stream) == message(b"hello")
        headers = client.trailers(stream)
        assert headers[":status"] == "200" and headers["content-type"] == "application/grpc"
        assert headers["grpc-status"] == "0"

    run(test)


def test_an_answer_larger_than_the_clients_window_waits_for_window_updates() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await connect(1000)  # a 1000-byte stream window: the 300 kB answer needs ~300 updates
        streams = [await client.call(message(b"big300000")) for _ in range(3)]
        await client.until(lambda events: all(client.ended(s)(events) for s in streams))
        for stream in streams:
            assert client.body(stream) == message(b"r" * 300000) and client.trailers(stream)["grpc-status"] == "0"

    run(test)


def test_a_request_larger_than_the_stream_window_is_read_whole() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await connect()
        payload = bytes(range(256)) * 12000  # 3 MB against a 1 MiB stream window: sent as WINDOW_UPDATEs come
        stream = await client.call(message(payload))
        await client.until(client.ended(stream), 10)
        assert client.body(stream) == message(payload) and client.trailers(stream)["grpc-status"] == "0"

    run(test, max_receive_message_length=8 << 20)


def test_a_client_that_stops_reading_holds_its_stream_writer_not_our_memory() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        YIELDED.clear()
        client = await connect(1000)  # reads nothing more after the call: its window stays shut
        stream = await client.call(message(b"500"), path="/test.Echo/Stream")  # 50 MB if nothing held it
        await asyncio.sleep(0.5)
        assert 0 < len(YIELDED) <= 12, f"{len(YIELDED)} messages of 100 kB made for a client reading none"
        client.h2.reset_stream(stream)
        client.flush()

    run(test)


def test_what_a_connection_buffers_is_bounded_and_its_calls_still_finish() -> None:
    budget = 1 << 20

    async def unfinished(connect: Any, server: Server, port: int) -> None:
        client = await connect()
        # 40 streams each announcing a 3 MB message and sending 2.9 MB of it, never the rest
        bodies = {open_stream(client): message(b"u" * 3_000_000)[:2_900_000] for _ in range(40)}
        await pump(client, bodies, 1.5, end=False)
        [connection] = server._connections
        window = connection.limits.stream_window
        held = sum(stream.buffered for stream in connection.streams.values())
        assert held <= budget + 3_000_005 + 40 * window, f"{held} bytes buffered for one connection"
        assert held < 40 * 2_900_000 / 3

    async def concurrent(connect: Any, server: Server, port: int) -> None:
        client = await connect()
        bodies = {open_stream(client): message(bytes([i]) * 600_000) for i in range(20)}  # 12 MB against a 1 MiB budget
        await pump(client, bodies, 15)
        for stream, body in bodies.items():
            assert client.trailers(stream).get("grpc-status") == "0" and client.body(stream) == body

    run(unfinished, max_receive_message_length=4 << 20, limits=Limits(buffer_budget=budget))
    run(concurrent, max_receive_message_length=4 << 20, limits=Limits(buffer_budget=budget))


def test_ping_and_settings_are_acknowledged() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await connect()
        client.h2.ping(b"12345678")
        client.flush()
        events = await client.until(lambda ev: any(isinstance(e, h2.events.PingAckReceived) for e in ev))
        assert next(e for e in events if isinstance(e, h2.events.PingAckReceived)).ping_data == b"12345678"
        await client.until(lambda ev: any(isinstance(e, h2.events.SettingsAcknowledged) for e in ev))
        assert client.h2.remote_settings.max_concurrent_streams == 256

    run(test)


def test_protocol_errors_end_only_their_connection_with_goaway() -> None:
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

    async def test(connect: Any, server: Server, port: int) -> None:
        healthy = await connect()
        assert goaway_code(await raw(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"x" * 30)) == 0x1
        too_big = b"\x00\x40\x01\x00\x00\x00\x00\x00\x01" + b"x" * 16385  # a 16385-byte DATA frame
        assert goaway_code(await raw(port, preface + too_big)) == 0x6  # FRAME_SIZE_ERROR
        bad_hpack = b"\x00\x00\x01\x01\x05\x00\x00\x00\x01\x80"  # HEADERS with header index 0
        assert goaway_code(await raw(port, preface + bad_hpack)) == 0x9  # COMPRESSION_ERROR
        even = b"\x00\x00\x01\x01\x05\x00\x00\x00\x02\x83"  # a client stream with an even id
        assert goaway_code(await raw(port, preface + even)) == 0x1
        stream = await healthy.call(message(b"still here"))
        await healthy.until(healthy.ended(stream))
        assert healthy.body(stream) == message(b"still here")

    run(test)


def test_a_connection_without_a_preface_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    from serve.frontends.grpc.http2 import lifecycle

    monkeypatch.setattr(lifecycle, "PREFACE_SECONDS", 0.2)

    async def test(connect: Any, server: Server, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(PREFACE[:10])  # half a preface, then silence
        received = b""
        while chunk := await asyncio.wait_for(reader.read(65536), 5):
            received += chunk
        assert goaway_code(received) == 0x1
        writer.close()

    run(test)


def test_a_rapid_reset_flood_ends_its_connection_only() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        healthy = await connect()
        client = RawClient(*await asyncio.open_connection("127.0.0.1", port))
        block = encode([(":method", "POST"), (":scheme", "http"), (":path", ECHO), (":authority", "t"),
                        ("content-type", "application/grpc")])  # fmt: skip
        flood = b"".join(frame(1, 0x4, s, block) + frame(3, 0, s, (8).to_bytes(4, "big")) for s in range(1, 1001, 2))
        client.writer.write(flood)  # 500 streams opened and reset at once
        await client.until(lambda: any(k == 7 for k, _, _, _ in client.frames))
        goaway = next(p for k, _, _, p in client.frames if k == 7)
        assert struct.unpack(">I", goaway[4:8])[0] == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        stream = await healthy.call(message(b"unhurt"))
        await healthy.until(healthy.ended(stream))
        assert healthy.body(stream) == message(b"unhurt")

    run(test)


def test_idle_connections_past_the_limit_close_the_oldest() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        clients = [await connect() for _ in range(2)]
        await clients[0].until(lambda ev: any(isinstance(e, h2.events.SettingsAcknowledged) for e in ev))
        busy = await clients[0].call(message(b"sleep0.5"))  # in a call: not idle, so never the one closed
        await asyncio.sleep(0.1)
        clients.append(await connect())  # idle now: clients 1 and 2, the limit
        await clients[2].until(lambda ev: any(isinstance(e, h2.events.SettingsAcknowledged) for e in ev))
        newest = await connect()  # one more: the one idle longest, client 1, is closed
        await clients[1].until(lambda ev: any(isinstance(e, h2.events.ConnectionTerminated) for e in ev))
        await clients[0].until(clients[0].ended(busy))
        assert clients[0].trailers(busy)["grpc-status"] == "0"
        assert not any(isinstance(e, h2.events.ConnectionTerminated) for e in clients[2].events)
        stream = await newest.call(message(b"new"))
        await newest.until(newest.ended(stream))
        assert newest.body(stream) == message(b"new")

    run(test, limits=Limits(max_idle_connections=2))


def test_past_the_idle_limit_a_connection_never_answered_goes_before_an_older_idle_client() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        client.call(1, b"one")
        await client.until(lambda: client.ended(1))  # answered once, idle since
        hoarder = await raw_client(port)
        await hoarder.settled()  # connected after the client went idle, never asks for anything
        newest = await raw_client(port)  # one more: the hoarder goes, though the client has idled longer
        await hoarder.until_closed(5)
        assert hoarder.goaway_code() == 0 and hoarder.closed
        client.call(3, b"two")
        await client.until(lambda: client.ended(3))
        assert client.headers[3]["grpc-status"] == "0"
        newest.call(1, b"three")
        await newest.until(lambda: newest.ended(1))

    run(test, limits=Limits(max_idle_connections=2))


def test_an_evicted_connection_lingers_so_a_call_crossing_its_goaway_is_not_reset() -> None:
    """The client writes a call after our GOAWAY left and before reading it. Had the server closed at once, that
    write would meet a closed socket and the client a reset (grpc: "Stream removed (sendmsg: Broken pipe)"); it
    reads the GOAWAY instead, whose last stream (0) says the call was not taken, so the client may retry it."""

    async def test(connect: Any, server: Server, port: int) -> None:
        evicted = await raw_client(port)
        await evicted.settled()
        await raw_client(port)  # past max_idle_connections: the idle one is evicted
        await asyncio.sleep(0.3)  # the GOAWAY is on its way, unread
        evicted.call(1, b"crossed")
        await asyncio.sleep(0.3)
        evicted.writer.write(frame(6, 0, 0, b"12345678"))  # a PING: a write after the reset would fail
        await evicted.until_closed(10)
        assert not evicted.was_reset
        assert [struct.unpack(">II", p) for k, _, _, p in evicted.frames if k == 7] == [(0, 0)]
        assert not evicted.ended(1)  # dropped unanswered, as the GOAWAY's last stream says

    run(test, limits=Limits(max_idle_connections=1))


def test_at_most_max_lingering_connections_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each lingering connection holds a descriptor: past MAX_LINGERING an evicted one closes at once (its late
    write meets a reset), and the count goes back to 0 when the lingering ones close."""
    monkeypatch.setattr(lifecycle, "MAX_LINGERING", 1)
    monkeypatch.setattr(lifecycle, "LINGER_SECONDS", 0.5)

    async def test(connect: Any, server: Server, port: int) -> None:
        first = await raw_client(port)
        await first.settled()
        second = await raw_client(port)  # evicts the first, which lingers
        await second.settled()
        await raw_client(port)  # evicts the second: one lingers already, so it closes at once
        assert ServerConnection.lingering == 1
        await asyncio.sleep(0.2)
        for evicted in (first, second):
            evicted.call(1, b"late")
            await asyncio.sleep(0.1)
            evicted.writer.write(frame(6, 0, 0, b"12345678"))
            await evicted.until_closed(5)
        assert not first.was_reset and second.was_reset
        for _ in range(50):
            if not ServerConnection.lingering:
                break
            await asyncio.sleep(0.1)
        assert ServerConnection.lingering == 0

    run(test, limits=Limits(max_idle_connections=1))


def test_streams_past_the_limit_are_refused() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = RawClient(*await asyncio.open_connection("127.0.0.1", port))
        for stream in (1, 3):
            client.call(stream, b"sleep0.3")
        client.call(5, b"x")
        await client.until(lambda: all(client.ended(s) for s in (1, 3, 5)))
        resets = [(s, struct.unpack(">I", p)[0]) for k, _, s, p in client.frames if k == 3]
        assert resets == [(5, h2.errors.ErrorCodes.REFUSED_STREAM)]
        assert client.headers[1]["grpc-status"] == client.headers[3]["grpc-status"] == "0"

    run(test, limits=Limits(max_concurrent_streams=2))


def test_a_reset_from_the_client_cancels_the_handler() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        RELEASED.clear()
        client = await connect()
        stream = await client.call(message(b"hold"))
        await asyncio.sleep(0.2)
        client.h2.reset_stream(stream)
        client.flush()
        for _ in range(50):
            if RELEASED:
                break
            await asyncio.sleep(0.02)
        assert RELEASED == ["cancelled"]
        again = await client.call(message(b"after"))
        await client.until(client.ended(again))
        assert client.body(again) == message(b"after")

    run(test)


def test_the_deadline_ends_the_call_with_deadline_exceeded() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await connect()
        stream = await client.call(message(b"sleep2"), grpc_timeout="100m")
        await client.until(client.ended(stream), 1.5)
        assert client.trailers(stream)["grpc-status"] == str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0])

    run(test)


def test_compressed_requests_and_the_limits() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await connect()
        zipped = await client.call(message(gzip.compress(b"packed"), compressed=True), grpc_encoding="gzip")
        bomb = await client.call(message(gzip.compress(b"\0" * 200_000), compressed=True), grpc_encoding="gzip")
        large = await client.call(message(b"x" * 100_001))
        unknown = await client.call(message(b"zz", compressed=True), grpc_encoding="snappy")
        corrupt = await client.call(message(b"not gzip", compressed=True), grpc_encoding="gzip")
        truncated = await client.call(message(b"whole")[:-2])
        too_big_answer = await client.call(message(b"big200000"))
        await client.until(lambda ev: all(client.ended(s)(ev) for s in (zipped, bomb, large, unknown, too_big_answer)))
        assert client.body(zipped) == message(b"packed")
        exhausted = str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
        for stream in (bomb, large, too_big_answer):
            assert client.trailers(stream)["grpc-status"] == exhausted, client.trailers(stream)
        assert client.trailers(unknown)["grpc-status"] == str(grpc.StatusCode.UNIMPLEMENTED.value[0])
        await client.until(lambda ev: client.ended(corrupt)(ev) and client.ended(truncated)(ev))
        invalid = str(grpc.StatusCode.INVALID_ARGUMENT.value[0])
        assert client.trailers(corrupt)["grpc-status"] == client.trailers(truncated)["grpc-status"] == invalid

    run(test, max_receive_message_length=100_000, max_send_message_length=100_000)


def test_odd_metadata_fails_at_most_its_own_stream() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = RawClient(*await asyncio.open_connection("127.0.0.1", port))
        odd = encode([(":method", "POST"), (":path", ECHO), ("", "empty name"), ("x-bin", "not base64!"),
                      ("content-type", "application/grpc")])  # fmt: skip
        client.writer.write(frame(1, 0x4, 1, odd) + frame(0, 0x1, 1, message(b"odd")))
        client.call(3, b"fine")
        await client.until(lambda: client.ended(1) and client.ended(3))
        assert client.headers[3]["grpc-status"] == "0"

    run(test)


def test_not_a_grpc_request_and_an_unknown_method() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await connect()
        missing = await client.call(message(b"x"), path="/nope.Service/Call")
        plain = client.h2.get_next_available_stream_id()
        fields = [(":method", "POST"), (":scheme", "http"), (":path", ECHO), (":authority", "t"),
                  ("content-type", "text/plain")]  # fmt: skip
        client.h2.send_headers(plain, fields, end_stream=True)
        client.flush()
        await client.until(lambda ev: client.ended(missing)(ev) and client.ended(plain)(ev))
        assert client.trailers(missing)["grpc-status"] == str(grpc.StatusCode.UNIMPLEMENTED.value[0])
        assert client.trailers(plain)[":status"] == "415"

    run(test)


def test_stop_lets_calls_in_flight_finish_and_takes_no_new_ones() -> None:
    async def main() -> None:
        server = make_server()
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        client = RawClient(*await asyncio.open_connection("127.0.0.1", port))
        client.call(1, b"sleep0.3")
        await asyncio.sleep(0.1)
        stopping = asyncio.ensure_future(server.stop(5))
        await client.until(lambda: client.ended(1))
        kinds = [k for k, _, _, _ in client.frames]
        assert 7 in kinds and kinds.index(7) < len(kinds) - 1, "GOAWAY came before the answer in flight"
        assert client.headers[1]["grpc-status"] == "0"
        await asyncio.wait_for(stopping, 5)
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)

    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_call_still_running_when_the_grace_period_ends_is_unavailable() -> None:
    async def main() -> None:
        RELEASED.clear()
        server = make_server()
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        client = RawClient(*await asyncio.open_connection("127.0.0.1", port))
        client.call(1, b"hold")
        await asyncio.sleep(0.2)
        await server.stop(0.2)
        await client.until(lambda: client.ended(1))
        assert client.headers[1]["grpc-status"] == str(grpc.StatusCode.UNAVAILABLE.value[0])
        assert "shutting down" in client.headers[1]["grpc-message"]
        assert RELEASED == ["cancelled"]  # the handler was stopped too

    asyncio.run(asyncio.wait_for(main(), 20))
