"""A REST connection's answer goes out in one write (exchange.py), and otherwise exactly as uvicorn's own cycle
writes it: the same bytes, a streamed answer's head before its first chunk, the same refusals of a broken app.
Driven through the listener's protocol and, as the reference, uvicorn's plain httptools protocol, each with a
transport that records its writes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from serve.frontends.http.connection_limits import ConnectionLimits, limited_http_protocol

REQUEST = b"POST /predictions/m HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
HEAD_REQUEST = b"HEAD /predictions/m HTTP/1.1\r\nHost: x\r\n\r\n"
OLD_REQUEST = b"POST /predictions/m HTTP/1.0\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def writelines(self, parts: Any) -> None:
        self.writes.append(b"".join(parts))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 5000)}.get(name, default)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...


def _exchange(app: Any, request: bytes = REQUEST, reference: bool = False) -> Transport:
    """The transport of the listener's protocol (or uvicorn's own, the reference) after answering `request`."""

    async def main() -> Transport:
        config = uvicorn.Config(app, log_config=None, lifespan="off")
        cls = HttpToolsProtocol if reference else limited_http_protocol(ConnectionLimits())
        protocol = cls(config=config, server_state=ServerState(), app_state={})
        transport = Transport()
        protocol.connection_made(transport)
        protocol.data_received(request)
        for _ in range(100):  # the app's task runs within a few loop turns
            await asyncio.sleep(0)
        protocol.connection_lost(None)
        return transport

    return asyncio.run(asyncio.wait_for(main(), 10))


def _answer(status: int, headers: list[tuple[bytes, bytes]], *bodies: bytes) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": status, "headers": headers})
        for i, body in enumerate(bodies):
            await send({"type": "http.response.body", "body": body, "more_body": i < len(bodies) - 1})

    return app


JSON = [(b"content-length", b"5"), (b"content-type", b"application/json")]


def test_an_answer_with_a_length_is_one_write():
    ours, theirs = _exchange(_answer(200, JSON, b"[1.0]")), _exchange(_answer(200, JSON, b"[1.0]"), reference=True)
    assert len(ours.writes) == 1 and len(theirs.writes) == 2
    assert ours.writes[0] == b"".join(theirs.writes) and ours.writes[0].endswith(b"\r\n\r\n[1.0]")


def test_a_streamed_answer_writes_its_head_first_then_each_chunk():
    app = _answer(200, [(b"content-type", b"text/plain")], b"one", b"two")
    ours, theirs = _exchange(app), _exchange(app, reference=True)
    assert ours.writes == theirs.writes and ours.writes[0].endswith(b"transfer-encoding: chunked\r\n\r\n")


@pytest.mark.parametrize(
    ("status", "headers", "bodies", "request_bytes"),
    [
        (200, [(b"content-length", b"1"), (b"x-evil", b"a\r\nset-cookie: b")], [b"x"], REQUEST),  # refused value
        (200, [(b"content-length", b"1"), (b"bad name", b"v")], [b"x"], REQUEST),  # refused name
        (200, [(b"content-length", b"9")], [b"short"], REQUEST),  # shorter than announced: closed
        (200, [(b"content-length", b"2")], [b"longer"], REQUEST),  # longer than announced: refused
        (200, JSON, [b"[1.0]"], HEAD_REQUEST),  # the head alone
        (204, [], [b""], REQUEST),
        (200, [*JSON, (b"connection", b"close")], [b"[1.0]"], REQUEST),
        (200, JSON, [b"[1.0]"], OLD_REQUEST),  # HTTP/1.0: connection: close added
        (200, [(b"content-length", b"6")], [b"[1", b".0]", b"!"], REQUEST),  # a length sent in parts
    ],
)
def test_every_answer_is_uvicorns_to_the_byte(status, headers, bodies, request_bytes):
    app = _answer(status, headers, *bodies)
    ours, theirs = _exchange(app, request_bytes), _exchange(app, request_bytes, reference=True)
    assert (b"".join(ours.writes), ours.closed) == (b"".join(theirs.writes), theirs.closed)
