"""The peers the HTTP/2 server tests talk to: an `h2` client (`Client`), a client of raw frames (`RawClient`), and
`run`, which starts serve's native gRPC server with echo methods on 127.0.0.1 port 0 for one test.

`/test.Echo/Call` echoes its request; `sleep<seconds>` sleeps first, `big<n>` answers n bytes, `hold` waits (30 s)
until cancelled and records it in RELEASED. `/test.Echo/Stream` answers int(request) messages of 100 kB, counted
in YIELDED. `/test.Echo/Collect` (client streaming) answers its requests joined.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

pytest.importorskip("h2")
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from serve.frontends.grpc.http2.frames import PREFACE
from serve.frontends.grpc.http2.hpack import Decoder, encode
from serve.frontends.grpc.native import Server

ECHO = "/test.Echo/Call"
RELEASED: list[str] = []


def message(payload: bytes, compressed: bool = False) -> bytes:
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


async def echo(request: bytes, context: Any) -> bytes:
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


async def stream_handler(request: bytes, context: Any) -> Any:
    """int(request) messages of 100 kB each, counting them in YIELDED."""
    for i in range(int(request)):
        YIELDED.append(i)
        yield b"s" * 100_000


async def collect(requests: Any, context: Any) -> bytes:
    """Client streaming: the requests joined, once the client has sent its last."""
    return b"".join([request async for request in requests])


def make_server(**kwargs: Any) -> Server:
    server = Server(**kwargs)
    handlers = {"Call": grpc.unary_unary_rpc_method_handler(echo),
                "Stream": grpc.unary_stream_rpc_method_handler(stream_handler),
                "Collect": grpc.stream_unary_rpc_method_handler(collect)}  # fmt: skip
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("test.Echo", handlers)])
    return server


def run(test: Callable[..., Awaitable[None]], window: int = 65535, **kwargs: Any) -> None:
    async def main() -> None:
        server = make_server(**kwargs)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()

        async def connect(client_window: int = window) -> Client:
            return Client(*await asyncio.open_connection("127.0.0.1", port), client_window)

        try:
            await test(connect, server, port)
        finally:
            await server.stop(0)

    asyncio.run(asyncio.wait_for(main(), 20))


async def pump(client: Client, bodies: dict[int, bytes], seconds: float, end: bool = True) -> None:
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


def open_stream(client: Client) -> int:
    stream = client.h2.get_next_available_stream_id()
    client.h2.send_headers(stream, [(":method", "POST"), (":scheme", "http"), (":path", ECHO), (":authority", "t"),
                                    ("content-type", "application/grpc")])  # fmt: skip
    return stream


async def raw(port: int, data: bytes) -> bytes:
    """What the server sends back to `data` before it closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    out = b""
    while chunk := await asyncio.wait_for(reader.read(65536), 5):
        out += chunk
    writer.close()
    return out


def goaway_code(data: bytes) -> int:
    pos = 0
    while pos + 9 <= len(data):
        length, kind = int.from_bytes(data[pos : pos + 3], "big"), data[pos + 3]
        if kind == 7:
            return struct.unpack(">I", data[pos + 13 : pos + 17])[0]
        pos += 9 + length
    raise AssertionError(f"no GOAWAY in {data!r}")


class RawClient:
    """Frames written and read by hand, for what h2 will not do (open streams past the peer's limit, break the
    protocol on purpose, read frames after GOAWAY)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.decoder = reader, writer, Decoder()
        self.frames: list[tuple[int, int, int, bytes]] = []  # (type, flags, stream id, payload)
        self.headers: dict[int, dict[str, str]] = {}
        self.closed = False
        self.was_reset = False  # the server reset the connection (a clean close reads as EOF)
        self._buffer = b""
        writer.write(PREFACE + frame(4, 0, 0, b""))

    def call(self, stream: int, body: bytes, path: str = ECHO) -> None:
        self.writer.write(frame(1, 0x4, stream, request_block(path)) + frame(0, 0x1, stream, message(body)))

    async def until(self, done: Callable[[], bool], seconds: float = 20) -> None:
        """Read frames until `done()`; AssertionError if the server closes the connection first."""
        await self._read(done, seconds)
        assert done(), "the server closed the connection"

    async def until_closed(self, seconds: float = 20) -> None:
        await self._read(lambda: False, seconds)

    async def poll(self, seconds: float) -> None:
        """Read what arrives within `seconds`."""
        with contextlib.suppress(TimeoutError):
            await self._read(lambda: False, seconds)

    async def _read(self, done: Callable[[], bool], seconds: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not done() and not self.closed:
            try:
                chunk = await asyncio.wait_for(self.reader.read(65536), max(0.01, deadline - loop.time()))
            except (ConnectionResetError, BrokenPipeError):
                chunk, self.was_reset = b"", True
            if not chunk:
                self.closed = True
            self._buffer += chunk
            buffer = self._buffer
            while len(buffer) >= 9 and len(buffer) >= 9 + int.from_bytes(buffer[:3], "big"):
                length = int.from_bytes(buffer[:3], "big")
                kind, flags, stream = buffer[3], buffer[4], int.from_bytes(buffer[5:9], "big")
                payload, buffer = buffer[9 : 9 + length], buffer[9 + length :]
                self.frames.append((kind, flags, stream, payload))
                if kind == 1:
                    self.headers.setdefault(stream, {}).update(self.decoder.decode(payload))
                if kind == 4 and not flags & 1 and not self.closed:
                    self.writer.write(frame(4, 1, 0, b""))
            self._buffer = buffer

    async def settled(self) -> None:
        """Wait for the server's SETTINGS (and so have acknowledged them): nothing more is written unasked."""
        await self.until(lambda: any(kind == 4 and not flags & 1 for kind, flags, _, _ in self.frames))

    def ended(self, stream: int) -> bool:
        return any(s == stream and (k == 3 or (k in (0, 1) and f & 1)) for k, f, s, _ in self.frames)

    def reset_code(self, stream: int) -> int | None:
        """The error code of the server's RST_STREAM on `stream`, if it sent one."""
        return next((struct.unpack(">I", p)[0] for k, _, s, p in self.frames if k == 3 and s == stream), None)

    def goaway_code(self) -> int | None:
        return next((struct.unpack(">I", p[4:8])[0] for k, _, _, p in self.frames if k == 7), None)


def request_block(path: str = ECHO, extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A gRPC request's header block (HPACK literals) with `extra` fields after the usual ones."""
    return encode([(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "t"),
                   ("content-type", "application/grpc"), *extra])  # fmt: skip


async def raw_client(port: int) -> RawClient:
    return RawClient(*await asyncio.open_connection("127.0.0.1", port))


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


class RecordingTransport:
    """What a connection needs of a transport when driven directly, without a socket: it records the writes and
    whether reading is paused."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.reading = True
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def can_write_eof(self) -> bool:
        return False

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else None

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True
