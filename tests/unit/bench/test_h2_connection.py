"""bench/h2_connection.py: serve's gRPC server on the `h2`-based connection answers real clients (grpcio, an h2
client) and keeps the protections of serve's own connection: windows enforced, floods and idle requests cut off,
header blocks timed, at most FRAMES_PER_TURN frames a turn, a graceful stop. Where h2 answers otherwise than serve's
connection (a malformed request ends the connection), bench/RESULTS.md says so; these tests hold what both do."""

from __future__ import annotations

import asyncio
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

pytest.importorskip("h2")

from bench.h2_connection import H2Connection
from serve.frontends.grpc.http2 import errors, flood
from serve.frontends.grpc.http2.frames import PREFACE
from serve.frontends.grpc.http2.lifecycle import FRAMES_PER_TURN, Limits
from serve.frontends.grpc.native import Server
from tests.unit.frontends.grpc.http2 import peers
from tests.unit.frontends.grpc.http2.peers import (
    RecordingTransport,
    frame,
    make_server,
    message,
    raw_client,
    request_block,
)

DATA, HEADERS, SETTINGS, PING, CONTINUATION = 0, 1, 4, 6, 9
END_STREAM, END_HEADERS = 0x1, 0x4


def run(test: Any, **kwargs: Any) -> None:
    peers.run(test, connection_class=H2Connection, **kwargs)


async def _probe(port: int) -> None:
    client = await raw_client(port)
    client.call(1, b"probe")
    await client.until(lambda: client.ended(1))
    assert client.headers[1]["grpc-status"] == "0"
    client.writer.close()


def test_grpcio_calls_of_every_kind() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            unary = channel.unary_unary("/test.Echo/Call")
            assert await unary(b"hello", timeout=10) == b"hello"
            big = b"b" * 3_000_000  # past every window: both ways wait for WINDOW_UPDATEs
            assert await unary(big, timeout=10) == big
            assert len(await unary(b"big2000000", timeout=10)) == 2_000_000
            answers = [m async for m in channel.unary_stream("/test.Echo/Stream")(b"5", timeout=10)]
            assert len(answers) == 5 and all(len(m) == 100_000 for m in answers)
            joined = await channel.stream_unary("/test.Echo/Collect")(iter([b"a", b"b", b"c"]), timeout=10)
            assert joined == b"abc"
            results = await asyncio.gather(*(unary(str(i).encode(), timeout=10) for i in range(64)))
            assert results == [str(i).encode() for i in range(64)]
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await channel.unary_unary("/test.Echo/Nope")(b"x", timeout=10)
            assert missing.value.code() == grpc.StatusCode.UNIMPLEMENTED

    run(test)


def test_an_h2_client_with_a_small_window() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await connect(1024)  # the server's answer waits for this client's window
        stream = await client.call(message(b"big300000"))
        await client.until(client.ended(stream))
        assert client.trailers(stream)["grpc-status"] == "0"
        assert client.body(stream) == message(b"r" * 300_000)

    run(test)


def test_data_past_the_window_is_flow_control_error() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        partial = (1 << 20).to_bytes(5, "big")  # a 1 MiB message announced; 80 KiB sent against a 64 KiB window
        client.writer.write(frame(HEADERS, END_HEADERS, 1, request_block()) + frame(DATA, 0, 1, partial) +
                            b"".join(frame(DATA, 0, 1, b"b" * 16384) for _ in range(5)))  # fmt: skip
        await client.until_closed()
        assert client.goaway_code() == errors.FLOW_CONTROL_ERROR
        await _probe(port)

    run(test)


@pytest.mark.parametrize("kind", ["ping", "settings", "empty-data"])
def test_a_flood_of_frames_that_do_no_work_ends_with_enhance_your_calm(kind: str) -> None:
    floods = {
        "ping": frame(PING, 0, 0, b"12345678") * 20_000,
        "settings": frame(SETTINGS, 0, 0, b"") * 20_000,
        "empty-data": frame(HEADERS, END_HEADERS, 1, request_block()) + frame(DATA, 0, 1, b"") * 20_000,
    }

    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        client.writer.write(floods[kind])
        await client.until_closed()
        assert client.goaway_code() == errors.ENHANCE_YOUR_CALM
        acks = sum(1 for k, flags, _, _ in client.frames if k in (SETTINGS, PING) and flags & 1)
        assert acks <= flood.IDLE_FRAMES_PER_SECOND + 2
        await _probe(port)

    run(test)


def test_an_unfinished_request_that_stops_sending_is_reset(monkeypatch: Any) -> None:
    from serve.frontends.grpc import native

    monkeypatch.setattr(native, "TICK_SECONDS", 0.1)

    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        half = message(b"x" * 99)[:50]  # half a message, then silence
        client.writer.write(frame(HEADERS, END_HEADERS, 1, request_block()) + frame(DATA, 0, 1, half))
        await client.until(lambda: client.ended(1))
        assert client.reset_code(1) == errors.CANCEL
        client.call(3, b"still served")
        await client.until(lambda: client.ended(3))
        assert client.headers[3]["grpc-status"] == "0"

    run(test, limits=Limits(request_idle_timeout=0.5))


def test_a_header_block_trickled_past_the_header_timeout_ends_the_connection(monkeypatch: Any) -> None:
    from serve.frontends.grpc import native

    monkeypatch.setattr(native, "TICK_SECONDS", 0.1)

    async def test(connect: Any, server: Server, port: int) -> None:
        client = await raw_client(port)
        await client.settled()
        block = request_block()
        client.writer.write(frame(HEADERS, 0, 1, block[:1]))
        for i in range(1, 40):  # one byte every 0.1 s against a 0.5 s timeout
            await client.poll(0.1)
            if client.goaway_code() is not None or client.closed:
                break
            client.writer.write(frame(CONTINUATION, 0, 1, block[i : i + 1]))
        await client.until_closed()
        assert client.goaway_code() == errors.NO_ERROR

    run(test, limits=Limits(header_timeout=0.5))


def test_a_stop_lets_the_call_in_flight_finish_after_goaway() -> None:
    async def main() -> None:
        server = make_server(connection_class=H2Connection)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        client = await raw_client(port)
        client.call(1, b"sleep0.3")
        await client.until(lambda: bool(client.frames))
        stopping = asyncio.ensure_future(server.stop(5))
        await client.until(lambda: client.ended(1))
        kinds = [k for k, _, _, _ in client.frames]
        assert 7 in kinds and kinds.index(7) < len(kinds) - 1, "GOAWAY came after the answer, or none came"
        assert client.headers[1]["grpc-status"] == "0"
        await asyncio.wait_for(stopping, 10)

    asyncio.run(asyncio.wait_for(main(), 20))


def test_at_most_frames_per_turn_are_handled_and_reading_pauses_while_writes_back_up(monkeypatch: Any) -> None:
    monkeypatch.setattr(flood, "IDLE_FRAMES_PER_SECOND", 10**9)

    async def main() -> None:
        connection = H2Connection(lambda c, s: None)  # type: ignore[arg-type, return-value]
        transport = RecordingTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        transport.written.clear()
        connection.data_received(PREFACE + frame(SETTINGS, 0, 0, b"") + frame(PING, 0, 0, b"12345678") * 2000)
        connection._flush()
        acks = transport.written.count(b"12345678")
        assert acks <= FRAMES_PER_TURN and not transport.reading  # the rest wait for the next turn
        for _ in range(10):
            await asyncio.sleep(0)
        assert transport.written.count(b"12345678") == 2000 and transport.reading
        connection.pause_writing()
        assert not transport.reading
        connection.resume_writing()
        assert transport.reading

    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_connection_cut_off_after_megabytes_of_data_gives_the_heap_back(monkeypatch: Any) -> None:
    """h2 drops the events of the frames it read with the one that broke the window, so the bytes are counted as
    frames are read: a window flood's connection trims the C heap when it closes, as serve's does."""
    import serve.frontends.grpc.http2.lifecycle as module  # where a connection ends, for every state machine

    trims: list[int] = []
    monkeypatch.setattr(module, "trim_soon", lambda: trims.append(1))

    async def main() -> None:
        connection = H2Connection(lambda c, s: None)  # type: ignore[arg-type, return-value]
        transport = RecordingTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        flood_ = b"".join(frame(DATA, 0, 1, b"x" * 16384) for _ in range(300))  # 4.9 MB against a 64 KiB window
        connection.data_received(PREFACE + frame(SETTINGS, 0, 0, b"") + frame(HEADERS, END_HEADERS, 1,
                                                                              request_block()) + flood_)  # fmt: skip
        assert transport.written.count(struct.pack(">I", errors.FLOW_CONTROL_ERROR)) >= 1  # GOAWAY's code
        connection.connection_lost(None)
        assert trims == [1]

    asyncio.run(asyncio.wait_for(main(), 10))


def test_the_launcher_builds_serves_grpc_servers_on_h2connection() -> None:
    from bench.serve_h2 import H2Server

    assert H2Server()._connection_class is H2Connection


def test_grpc_echo_measures_the_native_h2_variant() -> None:
    root = Path(__file__).resolve().parents[3]
    cmd = [sys.executable, str(root / "bench" / "grpc_echo.py"), "--seconds", "0.3", "--rounds", "1", "native-h2"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    [row] = [line for line in out.splitlines() if line.startswith("| native-h2 |")]
    assert float(row.split("|")[3]) > 0, row  # server CPU ms per call


def test_a_window_flood_on_many_streams_is_cut_off_and_its_connection_closed() -> None:
    """256 streams each starting a 6 MB message, DATA ignoring every window (the issue's attack): FLOW_CONTROL_ERROR,
    and the connection is gone, with the streams the budget held (h2 is closed by then: no WINDOW_UPDATE is owed)."""
    from bench import http2_attacks

    async def test(connect: Any, server: Server, port: int) -> None:
        name, _, method = http2_attacks.PREDICTIONS.strip("/").partition("/")
        handler = grpc.unary_unary_rpc_method_handler(peers.echo)
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(name, {method: handler})])
        outcome = await http2_attacks.window_flood("127.0.0.1", port, seconds=5)
        assert outcome.goaway_codes == [errors.FLOW_CONTROL_ERROR], outcome.summary()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while server._connections and loop.time() < deadline:
            await asyncio.sleep(0.05)
        assert not server._connections
        await _probe(port)

    run(test, max_receive_message_length=8 << 20)  # the messages are buffered, as serve's 6.5 MB default does
