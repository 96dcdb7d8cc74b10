"""HTTP/2's error codes (RFC 9113 section 7) and the two kinds of error: one that ends the connection, one a stream.

A `ConnectionError` ends the whole connection with GOAWAY; a `StreamError` resets one stream with RST_STREAM and the
others go on. The message says what the peer did wrong; it goes in GOAWAY's debug data and the server's log.
"""

from __future__ import annotations

NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
INTERNAL_ERROR = 0x2
FLOW_CONTROL_ERROR = 0x3
STREAM_CLOSED = 0x5
FRAME_SIZE_ERROR = 0x6
REFUSED_STREAM = 0x7
CANCEL = 0x8
COMPRESSION_ERROR = 0x9
ENHANCE_YOUR_CALM = 0xB


class Http2Error(Exception):
    code = PROTOCOL_ERROR

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class ConnectionError(Http2Error):  # HTTP/2's own term; shadows the builtin only where imported by name
    """The peer broke the protocol for the whole connection: GOAWAY with `code`, then close."""


class CompressionError(ConnectionError):
    """A header block HPACK cannot decode: the decoder's state is lost, so the connection ends."""

    code = COMPRESSION_ERROR


class StreamError(Http2Error):
    """The peer broke the protocol on one stream: RST_STREAM with `code` on `stream_id`."""

    def __init__(self, stream_id: int, message: str, code: int | None = None) -> None:
        super().__init__(message, code)
        self.stream_id = stream_id
