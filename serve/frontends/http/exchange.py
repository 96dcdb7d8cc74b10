"""One request and its response on a REST connection: uvicorn's cycle, answered with one write.

uvicorn's `RequestResponseCycle` writes the status line and headers when the app sends `http.response.start` and
the body in a second write: two system calls, two TCP segments for the client to read, per answer. `Exchange` keeps
the head of a response whose length is known until its body comes, and writes both with one `writelines` (one
system call, no copy): 7-10% off the server process's CPU per MLP prediction under wrk (bench/RESULTS.md). The
Python of an answer costs what uvicorn's does (5.7 us for an 8-header answer in both; making each request's cycle
an Exchange after uvicorn built it adds about 1 us): the gain is the system call, and the client's single read.

A chunked (streamed) response's head is written at once as before, so a streaming client sees the status before
the first chunk. The header names and values are checked for forbidden bytes once per response, on the joined
names and on the joined values: the patterns are character classes, so that is the same check as uvicorn's per
header. Everything else is uvicorn's: flow control, keep-alive and `Connection: close`, HEAD, the Content-Length
checks, the access log line; the bytes on the wire are uvicorn's (tests/unit/frontends/test_exchange.py compares
them), except that an app which fails between the start of a response with a length and its body leaves nothing
written, where uvicorn wrote the head: the client sees the connection close either way.

The listener's protocol (connection_limits.py) makes each request's cycle an Exchange once uvicorn has made it.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import HEADER_RE, HEADER_VALUE_RE, STATUS_LINE, RequestResponseCycle
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string


class Exchange(RequestResponseCycle):
    _head: bytes | None = None  # the status line and headers, until the body is written with them

    async def send(self, message: Any) -> None:  # type: ignore[override]
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', but got '{kind}'.")
            self._start(message["status"], [*self.default_headers, *message.get("headers", ())])
        elif not self.response_complete:
            if kind != "http.response.body":
                self._flush_head()
                raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{kind}'.")
            self._body(message.get("body", b""), message.get("more_body", False))
        else:
            raise RuntimeError(f"Unexpected ASGI message '{kind}' sent, after response already completed.")

    def _start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.response_started = True
        self.waiting_for_100_continue = False
        if HEADER_RE.search(b"".join([name for name, _ in headers])):
            raise RuntimeError("Invalid HTTP header name.")
        if HEADER_VALUE_RE.search(b"".join([value for _, value in headers])):
            raise RuntimeError("Invalid HTTP header value.")
        if self.access_log:
            scope = self.scope
            self.access_logger.info('%s - "%s %s HTTP/%s" %d', get_client_addr(scope), scope["method"],
                                    get_path_with_query_string(scope), scope["http_version"], status)  # fmt: skip
        content = [STATUS_LINE[status]]
        close = False
        for name, value in headers:
            name = name.lower()
            if name == b"content-length" and self.chunked_encoding is None:
                self.expected_content_length = int(value.decode())
                self.chunked_encoding = False
            elif name == b"transfer-encoding" and value.lower() == b"chunked":
                self.expected_content_length = 0
                self.chunked_encoding = True
            elif name == b"connection" and b"close" in [t.lower().strip() for t in value.split(b",")]:
                self.keep_alive = False
                close = True
            content += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not close:
            content.append(b"connection: close\r\n")
        if self.chunked_encoding is None and self.scope["method"] != "HEAD" and status not in (204, 304):
            self.chunked_encoding = True
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        if self.chunked_encoding:
            self.transport.write(b"".join(content))
        else:
            self._head = b"".join(content)

    def _body(self, body: bytes, more_body: bool) -> None:
        if self.scope["method"] == "HEAD":
            self.expected_content_length = 0
            data = b""
        elif self.chunked_encoding:
            data = b"".join([b"%x\r\n" % len(body), body, b"\r\n"] if body else []) + (b"" if more_body else
                                                                                     b"0\r\n\r\n")  # fmt: skip
        else:
            if len(body) > self.expected_content_length:
                self._flush_head()  # as uvicorn, whose head went out before the body
                raise RuntimeError("Response content longer than Content-Length")
            self.expected_content_length -= len(body)
            data = body
        head, self._head = self._head, None
        if head is None:
            self.transport.write(data)
        elif data:
            self.transport.writelines((head, data))
        else:
            self.transport.write(head)
        if not more_body:
            if self.expected_content_length != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self.response_complete = True
            self.message_event.set()
            if not self.keep_alive:
                self.transport.close()
            self.on_response()

    def _flush_head(self) -> None:
        if self._head is not None:
            self.transport.write(self._head)
            self._head = None
