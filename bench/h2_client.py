"""A minimal gRPC client on asyncio for the benchmarks: unary calls multiplexed on one HTTP/2 connection.

bench/grpc_rest.py drives REST with a bare keep-alive HTTP/1.1 client because httpx would cost more than the
server and measure itself; this is the same for gRPC, whose grpc.aio client costs ~0.15 ms of CPU per call (three
times the bare REST client). It sends each call as one HEADERS frame (HPACK literals, from serve's encoder) and one
DATA frame with END_STREAM, reads answers with serve's HPACK decoder (so it works against grpc.aio's server too),
gives the whole window back at once, and checks `grpc-status` 0. Not a general client: no deadlines, no
compression, no flow control beyond announcing large windows and returning every byte received.
"""

from __future__ import annotations

import asyncio
import struct

from serve.frontends.grpc.http2.frames import (
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    PING,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
)
from serve.frontends.grpc.http2.hpack import Decoder, encode

_HEAD = struct.Struct(">BHBBI")
WINDOW = 2**31 - 1


class GrpcClient(asyncio.Protocol):
    def __init__(self, authority: str) -> None:
        self.authority = authority
        self.decoder = Decoder()
        self.buffer = bytearray()
        self.next_id = 1
        self.calls: dict[int, tuple[asyncio.Future[bytes], bytearray, list[tuple[str, str]]]] = {}
        self.transport: asyncio.Transport | None = None

    @classmethod
    async def connect(cls, host: str, port: int) -> GrpcClient:
        loop = asyncio.get_running_loop()
        _, client = await loop.create_connection(lambda: cls(f"{host}:{port}"), host, port)
        return client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(PREFACE + _frame(SETTINGS, 0, 0, struct.pack(">HI", INITIAL_WINDOW_SIZE, WINDOW))  # type: ignore[attr-defined]
                        + _frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", WINDOW - 65535)))  # fmt: skip

    async def unary(self, path: str, message: bytes) -> bytes:
        """The answer's message bytes; RuntimeError for a status other than 0."""
        stream_id, self.next_id = self.next_id, self.next_id + 2
        block = encode([(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", self.authority),
                        ("content-type", "application/grpc"), ("te", "trailers")])  # fmt: skip
        body = b"\x00" + len(message).to_bytes(4, "big") + message
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.calls[stream_id] = (future, bytearray(), [])
        assert self.transport is not None
        self.transport.write(_frame(HEADERS, END_HEADERS, stream_id, block) + _frame(DATA, END_STREAM, stream_id, body))
        return await future

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        pos, out = 0, bytearray()
        while len(self.buffer) - pos >= 9:
            high, low, kind, flags, stream_id = _HEAD.unpack_from(self.buffer, pos)
            length = (high << 16) | low
            if len(self.buffer) - pos - 9 < length:
                break
            payload = bytes(self.buffer[pos + 9 : pos + 9 + length])
            pos += 9 + length
            call = self.calls.get(stream_id)
            if kind == SETTINGS and not flags & 1:
                out += _frame(SETTINGS, 1, 0, b"")
            elif kind == PING and not flags & 1:
                out += _frame(PING, 1, 0, payload)
            elif kind == DATA and payload:
                out += _frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", len(payload)))
                if call is not None:
                    call[1].extend(payload)
            elif kind == HEADERS:  # decoded whatever the stream: the HPACK table is the connection's
                fields = self.decoder.decode(payload)
                if call is not None:
                    call[2].extend(fields)
            elif kind in (RST_STREAM, GOAWAY) and call is not None:
                self.calls.pop(stream_id)[0].set_exception(RuntimeError(f"stream {stream_id} reset"))
            if call is not None and flags & END_STREAM and kind in (DATA, HEADERS):
                self._done(stream_id)
        del self.buffer[:pos]
        if out and self.transport is not None:
            self.transport.write(bytes(out))

    def _done(self, stream_id: int) -> None:
        future, body, headers = self.calls.pop(stream_id)
        status = dict(headers).get("grpc-status")
        if status != "0":
            future.set_exception(RuntimeError(f"grpc-status {status}: {dict(headers).get('grpc-message')}"))
        else:
            future.set_result(bytes(body[5:]))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return _HEAD.pack(len(payload) >> 16, len(payload) & 0xFFFF, kind, flags, stream_id) + payload
