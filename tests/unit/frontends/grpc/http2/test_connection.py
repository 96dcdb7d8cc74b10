"""serve's gRPC server (native.Server) at the HTTP/2 level, driven by python-hyper's `h2` client state machine.

grpc's own clients (the gRPC unit and integration tests) cover the calls they make; these cover what they rarely
do: windows smaller than a message both ways, protocol errors, a peer's reset and deadline, refused streams,
compressed and oversized messages, a graceful stop, and garbage that must hurt only its own connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

pytest.importorskip("h2")
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from serve.frontends.grpc.http2.connection import PREFACE, Limits
from serve.frontends.grpc.http2.hpack import Decoder, encode
from serve.frontends.grpc.native import Server

ECHO = "/test.Echo/Call"
RELEASED: list[str] = []


def _message(payload: bytes, compressed: bool = False) -> bytes:
    return (b"\x01" if compressed else b"\x00") + len(payload).to_bytes(4, "big") + payload


class Client:
    """An h2 client connection on asyncio streams: send calls, read events until a condition holds."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, window: int) -> None:
        self.reader, self.writer = reader, writer
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.h2.local_settings = h2.settings.Settings(client=True, initial_values={
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})  # fmt: skip
        self.h2.initiate_connection()
        self.events: list[Any] = []
        self.closed = False
        self.flush()

    def flush(self) -> None:
        self.writer.write(self.h2.data_to_send())

    async def call(self, body: bytes, path: str = ECHO, **headers: str) -> int:
        """Open a stream and send `body`, waiting for window as a well-behaved client must."""
        stream = self.h2.get_next_available_stream_id()
        fields = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "test"),
                  ("content-type", "application/grpc"), ("te", "trailers"), *headers.items()]  # fmt: skip
        self.h2.send_headers(stream, [(k.replace("_", "-"), v) for k, v in fields])
        sent = 0
        while sent < len(body):
            room = min(self.h2.local_flow_control_window(stream), 16384, len(body) - sent)
            if room:
                self.h2.send_data(stream, body[sent : sent + room])
                sent += room
            else:  # wait for the server's WINDOW_UPDATE
                self.flush()
                await self.until(lambda events: self.h2.local_flow_control_window(stream) > 0)
        self.h2.end_stream(stream)
        self.flush()
        return stream

    async def until(self, done: Callable[[list[Any]], bool], seconds: float = 5) -> list[Any]:
        async def read() -> None:
            while not done(self.events):
                data = await self.reader.read(65536)
                if not data:
                    self.closed = True
                    return
                for event in self.h2.receive_data(data):
                    self.events.append(event)
                    if isinstance(event, h2.events.DataReceived):  # a reader that keeps up: the window comes back
                        self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                self.flush()

        await asyncio.wait_for(read(), seconds)
        return self.events

    def ended(self, stream: int) -> Callable[[list[Any]], bool]:
        return lambda events: any(isinstance(e, h2.events.StreamEnded | h2.events.StreamReset)
                                  and e.stream_id == stream for e in events)  # fmt: skip

    def trailers(self, stream: int) -> dict[str, str]:
        out: dict[str, str] = {}
        for e in self.events:
            if isinstance(e, h2.events.ResponseReceived | h2.events.TrailersReceived) and e.stream_id == stream:
                out.update(e.headers)
        return out

    def body(self, stream: int) -> bytes:
        return b"".join(e.data for e in self.events if isinstance(e, h2.events.DataReceived) and e.stream_id == stream)


async def _echo(request: bytes, context: Any) -> bytes:
    if request.startswith(b"sleep"):
        await asyncio.sleep(float(request[5:]))
    if request.startswith(b"big"):
        return b"r" * int(request[3:])
    if request == b"hold":
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            RELEASED.append("cancelled")
            raise
    return request


YIELDED: list[int] = []


async def _stream(request: bytes, context: Any) -> Any:
    """int(request) messages of 100 kB each, counting them in YIELDED."""
    for i in range(int(request)):
        YIELDED.append(i)
        yield b"s" * 100_000


def _server(**kwargs: Any) -> Server:
    server = Server(**kwargs)
    handlers = {"Call": grpc.unary_unary_rpc_method_handler(_echo),
                "Stream": grpc.unary_stream_rpc_method_handler(_stream)}  # fmt: skip
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("test.Echo", handlers)])
    return server


def run(test: Callable[..., Awaitable[None]], window: int = 65535, **kwargs: Any) -> None:
    async def main() -> None:
        server = _server(**kwargs)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()

        async def connect(client_window: int = window) -> Client:
            return Client(*await asyncio.open_connection("127.0.0.1", port), client_window)

        try:
            await test(connect, server, port)
        finally:
            await server.stop(0)

    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_call_answers_headers_message_and_ok_trailers() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await connect()
        stream = await client.call(_message(b"hello"))
        await client.until(client.ended(stream))
        assert client.body(stream) == _message(b"hello")
        headers = client.trailers(stream)
        assert headers[":status"] == "200" and headers["content-type"] == "application/grpc"
        assert headers["grpc-status"] == "0"

    run(test)


def test_an_answer_larger_than_the_clients_window_waits_for_window_updates() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await connect(1000)  # a 1000-byte stream window: the 300 kB answer needs ~300 updates
        streams = [await client.call(_message(b"big300000")) for _ in range(3)]
        await client.until(lambda events: all(client.ended(s)(events) for s in streams))
        for stream in streams:
            assert client.body(stream) == _message(b"r" * 300000) and client.trailers(stream)["grpc-status"] == "0"

    run(test)


def test_a_request_larger_than_the_stream_window_is_read_whole() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await connect()
        payload = bytes(range(256)) * 12000  # 3 MB against a 1 MiB stream window: sent as WINDOW_UPDATEs come
        stream = await client.call(_message(payload))
        await client.until(client.ended(stream), 10)
        assert client.body(stream) == _message(payload) and client.trailers(stream)["grpc-status"] == "0"

    run(test, max_receive_message_length=8 << 20)


def test_a_client_that_stops_reading_holds_its_stream_writer_not_our_memory() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        YIELDED.clear()
        client = await connect(1000)  # reads nothing more after the call: its window stays shut
        stream = await client.call(_message(b"500"), path="/test.Echo/Stream")  # 50 MB if nothing held it
        await asyncio.sleep(0.5)
        assert 0 < len(YIELDED) <= 12, f"{len(YIELDED)} messages of 100 kB made for a client reading none"
        client.h2.reset_stream(stream)
        client.flush()

    run(test)


async def _pump(client: Client, bodies: dict[int, bytes], seconds: float, end: bool = True) -> None:
    """Send each stream's body as its windows allow (ending it when all is sent, if `end`), reading the server
    meanwhile, until every stream has ended or `seconds` have passed."""
    sent = dict.fromkeys(bodies, 0)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline and not all(client.ended(s)(client.events) for s in bodies):
        for stream, body in bodies.items():
            try:
                while sent[stream] < len(body):
                    room = min(client.h2.local_flow_control_window(stream), 16384, len(body) - sent[stream])
                    if room <= 0:
                        break
                    client.h2.send_data(stream, body[sent[stream] : sent[stream] + room])
                    sent[stream] += room
                if end and sent[stream] == len(body):
                    client.h2.end_stream(stream)
                    sent[stream] += 1  # ended
            except h2.exceptions.StreamClosedError:  # the server answered and closed it
                sent[stream] = len(body) + 1
        client.flush()
        with contextlib.suppress(TimeoutError):
            await client.until(lambda events: False, 0.05)


def _open(client: Client) -> int:
    stream = client.h2.get_next_available_stream_id()
    client.h2.send_headers(stream, [(":method", "POST"), (":scheme", "http"), (":path", ECHO), (":authority", "t"),
                                    ("content-type", "application/grpc")])  # fmt: skip
    return stream


def test_what_a_connection_buffers_is_bounded_and_its_calls_still_finish() -> None:
    budget = 1 << 20

    async def unfinished(connect: Any, server: Server, port: int) -> None:
        client = await connect()
        # 40 streams each announcing a 3 MB message and sending 2.9 MB of it, never the rest
        bodies = {_open(client): _message(b"u" * 3_000_000)[:2_900_000] for _ in range(40)}
        await _pump(client, bodies, 1.5, end=False)
        [connection] = server._connections
        window = connection.limits.stream_window
        held = sum(stream.buffered for stream in connection.streams.values())
        assert held <= budget + 3_000_005 + 40 * window, f"{held} bytes buffered for one connection"
        assert held < 40 * 2_900_000 / 3

    async def concurrent(connect: Any, server: Server, port: int) -> None:
        client = await connect()
        bodies = {_open(client): _message(bytes([i]) * 600_000) for i in range(20)}  # 12 MB against a 1 MiB budget
        await _pump(client, bodies, 15)
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


async def _raw(port: int, data: bytes) -> bytes:
    """What the server sends back to `data` before it closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    out = b""
    while chunk := await asyncio.wait_for(reader.read(65536), 5):
        out += chunk
    writer.close()
    return out


def _goaway_code(data: bytes) -> int:
    pos = 0
    while pos + 9 <= len(data):
        length, kind = int.from_bytes(data[pos : pos + 3], "big"), data[pos + 3]
        if kind == 7:
            return struct.unpack(">I", data[pos + 13 : pos + 17])[0]
        pos += 9 + length
    raise AssertionError(f"no GOAWAY in {data!r}")


def test_protocol_errors_end_only_their_connection_with_goaway() -> None:
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

    async def test(connect: Any, server: Server, port: int) -> None:
        healthy = await connect()
        assert _goaway_code(await _raw(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"x" * 30)) == 0x1
        too_big = b"\x00\x40\x01\x00\x00\x00\x00\x00\x01" + b"x" * 16385  # a 16385-byte DATA frame
        assert _goaway_code(await _raw(port, preface + too_big)) == 0x6  # FRAME_SIZE_ERROR
        bad_hpack = b"\x00\x00\x01\x01\x05\x00\x00\x00\x01\x80"  # HEADERS with header index 0
        assert _goaway_code(await _raw(port, preface + bad_hpack)) == 0x9  # COMPRESSION_ERROR
        even = b"\x00\x00\x01\x01\x05\x00\x00\x00\x02\x83"  # a client stream with an even id
        assert _goaway_code(await _raw(port, preface + even)) == 0x1
        stream = await healthy.call(_message(b"still here"))
        await healthy.until(healthy.ended(stream))
        assert healthy.body(stream) == _message(b"still here")

    run(test)


class RawClient:
    """Frames written and read by hand, for what h2 will not do (open streams past the peer's limit, read frames
    after GOAWAY)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.decoder = reader, writer, Decoder()
        self.frames: list[tuple[int, int, int, bytes]] = []  # (type, flags, stream id, payload)
        self.headers: dict[int, dict[str, str]] = {}
        writer.write(PREFACE + _frame(4, 0, 0, b""))

    def call(self, stream: int, body: bytes) -> None:
        block = encode([(":method", "POST"), (":scheme", "http"), (":path", ECHO), (":authority", "t"),
                        ("content-type", "application/grpc")])  # fmt: skip
        self.writer.write(_frame(1, 0x4, stream, block) + _frame(0, 0x1, stream, _message(body)))

    async def until(self, done: Callable[[], bool]) -> None:
        buffer = b""
        while not done():
            chunk = await asyncio.wait_for(self.reader.read(65536), 5)
            assert chunk, "the server closed the connection"
            buffer += chunk
            while len(buffer) >= 9 and len(buffer) >= 9 + int.from_bytes(buffer[:3], "big"):
                length = int.from_bytes(buffer[:3], "big")
                kind, flags, stream = buffer[3], buffer[4], int.from_bytes(buffer[5:9], "big")
                payload, buffer = buffer[9 : 9 + length], buffer[9 + length :]
                self.frames.append((kind, flags, stream, payload))
                if kind == 1:
                    self.headers.setdefault(stream, {}).update(self.decoder.decode(payload))
                if kind == 4 and not flags & 1:
                    self.writer.write(_frame(4, 1, 0, b""))

    def ended(self, stream: int) -> bool:
        return any(s == stream and (k == 3 or (k in (0, 1) and f & 1)) for k, f, s, _ in self.frames)


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def test_a_connection_without_a_preface_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    from serve.frontends.grpc.http2 import connection

    monkeypatch.setattr(connection, "PREFACE_SECONDS", 0.2)

    async def test(connect: Any, server: Server, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(PREFACE[:10])  # half a preface, then silence
        received = b""
        while chunk := await asyncio.wait_for(reader.read(65536), 5):
            received += chunk
        assert _goaway_code(received) == 0x1
        writer.close()

    run(test)


def test_a_rapid_reset_flood_ends_its_connection_only() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        healthy = await connect()
        client = RawClient(*await asyncio.open_connection("127.0.0.1", port))
        block = encode([(":method", "POST"), (":scheme", "http"), (":path", ECHO), (":authority", "t"),
                        ("content-type", "application/grpc")])  # fmt: skip
        flood = b"".join(_frame(1, 0x4, s, block) + _frame(3, 0, s, (8).to_bytes(4, "big")) for s in range(1, 1001, 2))
        client.writer.write(flood)  # 500 streams opened and reset at once
        await client.until(lambda: any(k == 7 for k, _, _, _ in client.frames))
        goaway = next(p for k, _, _, p in client.frames if k == 7)
        assert struct.unpack(">I", goaway[4:8])[0] == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        stream = await healthy.call(_message(b"unhurt"))
        await healthy.until(healthy.ended(stream))
        assert healthy.body(stream) == _message(b"unhurt")

    run(test)


def test_idle_connections_past_the_limit_close_the_oldest() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        clients = [await connect() for _ in range(2)]
        await clients[0].until(lambda ev: any(isinstance(e, h2.events.SettingsAcknowledged) for e in ev))
        busy = await clients[0].call(_message(b"sleep0.5"))  # in a call: not idle, so never the one closed
        await asyncio.sleep(0.1)
        clients.append(await connect())  # idle now: clients 1 and 2, the limit
        await clients[2].until(lambda ev: any(isinstance(e, h2.events.SettingsAcknowledged) for e in ev))
        newest = await connect()  # one more: the one idle longest, client 1, is closed
        await clients[1].until(lambda ev: any(isinstance(e, h2.events.ConnectionTerminated) for e in ev))
        await clients[0].until(clients[0].ended(busy))
        assert clients[0].trailers(busy)["grpc-status"] == "0"
        assert not any(isinstance(e, h2.events.ConnectionTerminated) for e in clients[2].events)
        stream = await newest.call(_message(b"new"))
        await newest.until(newest.ended(stream))
        assert newest.body(stream) == _message(b"new")

    run(test, limits=Limits(max_idle_connections=2))


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
        stream = await client.call(_message(b"hold"))
        await asyncio.sleep(0.2)
        client.h2.reset_stream(stream)
        client.flush()
        for _ in range(50):
            if RELEASED:
                break
            await asyncio.sleep(0.02)
        assert RELEASED == ["cancelled"]
        again = await client.call(_message(b"after"))
        await client.until(client.ended(again))
        assert client.body(again) == _message(b"after")

    run(test)


def test_the_deadline_ends_the_call_with_deadline_exceeded() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await connect()
        stream = await client.call(_message(b"sleep2"), grpc_timeout="100m")
        await client.until(client.ended(stream), 1.5)
        assert client.trailers(stream)["grpc-status"] == str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0])

    run(test)


def test_compressed_requests_and_the_limits() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await connect()
        zipped = await client.call(_message(gzip.compress(b"packed"), compressed=True), grpc_encoding="gzip")
        bomb = await client.call(_message(gzip.compress(b"\0" * 200_000), compressed=True), grpc_encoding="gzip")
        large = await client.call(_message(b"x" * 100_001))
        unknown = await client.call(_message(b"zz", compressed=True), grpc_encoding="snappy")
        corrupt = await client.call(_message(b"not gzip", compressed=True), grpc_encoding="gzip")
        truncated = await client.call(_message(b"whole")[:-2])
        too_big_answer = await client.call(_message(b"big200000"))
        await client.until(lambda ev: all(client.ended(s)(ev) for s in (zipped, bomb, large, unknown, too_big_answer)))
        assert client.body(zipped) == _message(b"packed")
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
        client.writer.write(_frame(1, 0x4, 1, odd) + _frame(0, 0x1, 1, _message(b"odd")))
        client.call(3, b"fine")
        await client.until(lambda: client.ended(1) and client.ended(3))
        assert client.headers[3]["grpc-status"] == "0"

    run(test)


def test_not_a_grpc_request_and_an_unknown_method() -> None:
    async def test(connect: Any, server: Server, port: int) -> None:
        client = await connect()
        missing = await client.call(_message(b"x"), path="/nope.Service/Call")
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
        server = _server()
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
