"""What one HTTP connection may cost the server before it has sent a request: header size, header count, time.

uvicorn's httptools protocol (the one `uvicorn[standard]` runs) buffers a header line of any length (a 64 MB header
was accepted and its memory never returned), takes any number of headers, and holds a connection that never
finishes its headers for ever (900 slow-header connections were all held). h11's `max_incomplete_event_size`
answers 400, not 431, and has no clock either. So `limited_http_protocol(limits)` returns a subclass of uvicorn's
`HttpToolsProtocol` for one listener that adds, below the ASGI app:

- request headers at most `max_header_line_size` bytes per line and `max_header_size` in all (request line
  included), at most `max_header_count` lines: 431 Request Header Fields Too Large (a request line over the line
  size: 414 URI Too Long). The check runs after every chunk read, so at most one read past the limit is held.
- `header_read_timeout` seconds from a connection's first byte (or from its opening) to the end of its headers;
  then 408 (when it sent part of a request) and the connection is closed.
- at most `max_idle_connections` connections per listener that are not running a request (opened, reading headers
  or idle between keep-alive requests); past that the one waiting longest is closed, one never answered first
  (as for `max_connections`). Idle keep-alive connections are also closed after `keep_alive_timeout` seconds
  (uvicorn's own timer).

Every connection also counts against the process's `max_connections`, with the gRPC servers' (serve/frontends/
connections.py): one waiting for headers or idle between requests is quiet since it began waiting, and is the one
evicted when a new connection finds the process at the cap; one running a request is never evicted.

A refusal writes a TorchServe-style JSON error with `Connection: close`, half-closes the socket and reads and
discards what the client is still sending for up to `DRAIN_SECONDS`, so the client reads the answer instead of a
reset.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

from serve.frontends.connections import OpenConnections
from serve.frontends.http.exchange import Exchange

DRAIN_SECONDS = 2.0
DRAIN_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ConnectionLimits:
    max_header_line_size: int = 16 * 1024
    max_header_size: int = 64 * 1024
    max_header_count: int = 100
    header_read_timeout: float = 10.0
    max_idle_connections: int = 1000


class _Refused(Exception):
    """Raised from a parser callback to stop parsing; the answer has already been written."""


REASONS = {
    408: ("RequestTimeoutException", "the request headers did not arrive within header_read_timeout ({} s)"),
    414: ("UriTooLongException", "the request line is longer than max_header_line_size ({} bytes)"),
    431: ("RequestHeaderFieldsTooLargeException", "{}"),
}


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    limits: ClassVar[ConnectionLimits] = ConnectionLimits()
    # this listener's connections not running a request, longest waiting first (a dict keeps insertion order)
    waiting: ClassVar[dict[LimitedHttpToolsProtocol, None]] = {}
    # the process's connections, shared with the gRPC servers (uvicorn's own `connections` is another thing)
    open_connections: ClassVar[OpenConnections | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._in_headers = False
        self._raw_header_bytes = 0  # bytes read while the current request's headers are incomplete
        self._header_bytes = 0  # request line and complete header lines of the current request
        self._header_count = 0
        self._refused: int | None = None
        self._discarded = 0
        self._waiting_since: float | None = None
        self.served = False  # it has answered a request (for eviction: those that never have go first)

    # connection life
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.open_connections is not None and not self.open_connections.opened(self):
            transport.close()  # every other connection is running a request: no room for one more
            return
        self._start_headers()
        self._arm_header_timer()  # from its opening
        self._wait()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.open_connections is not None:
            self.open_connections.closed(self)
        type(self).waiting.pop(self, None)
        self._cancel_header_timer()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        self.served = True
        super().on_response_complete()
        if self.cycle is not None and self.cycle.response_complete and not self.transport.is_closing():
            self._wait()

    def _wait(self) -> None:
        """Join the listener's waiting connections; past `max_idle_connections`, close the one waiting longest."""
        waiting = type(self).waiting
        waiting.pop(self, None)
        waiting[self] = None
        self._waiting_since = time.monotonic()
        while len(waiting) > self.limits.max_idle_connections:
            next((c for c in waiting if not c.served), next(iter(waiting))).evict()

    def quiet_since(self) -> float | None:
        """Since when it has waited for a request (None while it runs one): OpenConnections evicts the quietest."""
        return self._waiting_since if self in type(self).waiting else None

    def evict(self) -> None:
        type(self).waiting.pop(self, None)
        self._cancel_header_timer()
        self.transport.close()

    # reading a request's headers
    def _start_headers(self) -> None:
        self._in_headers = True
        self._raw_header_bytes = self._header_bytes = self._header_count = 0

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.limits.header_read_timeout, self._headers_timed_out)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_timed_out(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self._raw_header_bytes or self._header_bytes:
            self._answer(408, REASONS[408][1].format(self.limits.header_read_timeout), drain=False)
        else:  # nothing sent at all (a pre-opened or idle connection): just close
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._refused is not None:
            self._discard(len(data))
            return
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self._refused is None:
                self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._in_headers:  # a request's first bytes came (now) but not all of its headers: their clock runs
            self._arm_header_timer()
            self._raw_header_bytes += len(data)
            if self._raw_header_bytes > self.limits.max_header_size:
                self._too_large(f"the request headers are larger than max_header_size ({self.limits.max_header_size} "
                                "bytes)")  # fmt: skip

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._in_headers:
            self._raw_header_bytes = 0
        self._start_headers()

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self.limits.max_header_line_size:
            self._answer(414, REASONS[414][1].format(self.limits.max_header_line_size))
            raise _Refused

    def on_header(self, name: bytes, value: bytes) -> None:
        line = len(name) + len(value) + 4  # "name: value\r\n"
        self._header_bytes += line
        self._header_count += 1
        limits = self.limits
        if line > limits.max_header_line_size:
            why = f"a header line is longer than max_header_line_size ({limits.max_header_line_size} bytes)"
        elif self._header_count > limits.max_header_count:
            why = f"the request has more than max_header_count ({limits.max_header_count}) headers"
        elif self._header_bytes + len(self.url) > limits.max_header_size:
            why = f"the request headers are larger than max_header_size ({limits.max_header_size} bytes)"
        else:  # uvicorn's own on_header, inlined (one call less per header)
            name = name.lower()
            if name == b"expect" and value.lower() == b"100-continue":
                self.expect_100_continue = True
            self.headers.append((name, value))
            return
        self._too_large(why)
        raise _Refused

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._cancel_header_timer()
        type(self).waiting.pop(self, None)
        super().on_headers_complete()
        if type(self.cycle) is RequestResponseCycle:  # the request's cycle, answered in one write (exchange.py)
            self.cycle.__class__ = Exchange

    # refusing
    def _too_large(self, why: str) -> None:
        self._answer(431, f"{why}; send fewer or smaller headers, or raise the limit in config.properties")

    def _answer(self, status: int, message: str, drain: bool = True) -> None:
        """Write `status` with a JSON error and close: after draining what the client still sends, when `drain`."""
        self._refused = status
        self._in_headers = False
        self._cancel_header_timer()
        type(self).waiting.pop(self, None)
        body = json.dumps({"code": status, "type": REASONS[status][0], "message": message}).encode()
        head = [STATUS_LINE[status], b"content-type: application/json\r\n",
                b"content-length: %d\r\n" % len(body), b"connection: close\r\n\r\n"]  # fmt: skip
        self.transport.write(b"".join(head) + body)
        if drain and self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(DRAIN_SECONDS, self.transport.close)
        else:
            self.transport.close()

    def _discard(self, size: int) -> None:
        self._discarded += size
        if self._discarded > DRAIN_MAX_BYTES:
            self.transport.close()


def limited_http_protocol(limits: ConnectionLimits,
                          connections: OpenConnections | None = None) -> type[LimitedHttpToolsProtocol]:  # fmt: skip
    """A protocol class for one listener: its own limits and its own set of waiting connections, counted in the
    process's `connections` when given."""
    namespace = {"limits": limits, "waiting": {}, "open_connections": connections}
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), namespace)
