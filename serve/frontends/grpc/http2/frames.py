"""HTTP/2's wire vocabulary (RFC 9113 sections 4 and 6): the preface, frame types, flags, settings, and a frame's
nine-byte head. Shared by the server connection and the benchmarks' bare client."""

from __future__ import annotations

import struct

from serve.frontends.grpc.http2.errors import ConnectionError

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
HEAD = struct.Struct(">BHBBI")  # length (24 bits as byte + short), type, flags, stream id


def head(kind: int, flags: int, stream_id: int, length: int) -> bytes:
    return HEAD.pack(length >> 16, length & 0xFFFF, kind, flags, stream_id)


def unpad(flags: int, payload: bytes, stream_id: int) -> bytes:
    """A DATA or HEADERS payload without its padding (ConnectionError when the padding is as long as the frame)."""
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise ConnectionError(f"stream {stream_id}: padding as long as the frame")
    return payload[1 : len(payload) - payload[0]]
