"""HTTP connection limits on a real server (issue 17 item 3): header size and count (431), request line (414), the
header-read timeout (408, then closed), idle connections bounded in number and time; a normal client keeps being
answered throughout. Defaults for the sizes; times short enough that the test takes seconds, and far enough
apart (keep-alive 2 s, header read 10 s, TIMEOUT 30 s) that a machine at a load of 10 cannot confuse them."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.server import ServerProcess

HEADER_TIMEOUT = 10.0
KEEP_ALIVE = 2.0
MAX_IDLE = 100
TIMEOUT = 30


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("http_limits")
    (base / "store").mkdir()
    proc = ServerProcess(base / "run", base / "store", "--disable-token-auth", header_read_timeout=HEADER_TIMEOUT,
                         keep_alive_timeout=KEEP_ALIVE, max_idle_connections=MAX_IDLE).start()  # fmt: skip
    yield proc
    assert proc.stop() == 0


def _port(server: ServerProcess) -> int:
    return server.ports["inference"]


def _read_until_closed(sock: socket.socket, timeout: float = TIMEOUT) -> bytes:
    """Everything the server sends until it closes the connection (bounded by `timeout`)."""
    sock.settimeout(timeout)
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            return out
        out += chunk
    raise AssertionError(f"the server kept the connection open; it sent {out[:200]!r}")


def _exchange(server: ServerProcess, head: bytes) -> tuple[int, dict]:
    """Send a request head; the status and JSON body of the answer, asserting the connection is then closed."""
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=TIMEOUT) as sock:
        sock.sendall(head)
        answer = _read_until_closed(sock)
    status_line, _, rest = answer.partition(b"\r\n")
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert b"connection: close" in headers.lower()
    return int(status_line.split()[1]), json.loads(body)


def _request(*headers: bytes, path: bytes = b"/ping") -> bytes:
    return b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n"


def _healthy(server: ServerProcess) -> None:
    answer = httpx.get(server.inference + "/ping", timeout=TIMEOUT)
    assert answer.status_code == 200 and answer.json()["status"] == "Healthy"


def test_a_header_line_over_16_kib_is_431(server: ServerProcess) -> None:
    assert httpx.get(server.inference + "/ping", headers={"x-a": "a" * 16000}, timeout=TIMEOUT).status_code == 200
    status, body = _exchange(server, _request(b"x-a: " + b"a" * (16 * 1024)))
    assert (status, body["code"]) == (431, 431)
    assert "max_header_line_size (16384 bytes)" in body["message"]
    _healthy(server)


def test_headers_over_64_kib_in_all_are_431(server: ServerProcess) -> None:
    lines = [b"x-%d: " % i + b"a" * 15000 for i in range(5)]  # each line under 16 KiB, 75 KB together
    assert httpx.get(server.inference + "/ping", headers={f"x-{i}": "a" * 15000 for i in range(4)}).status_code == 200
    status, body = _exchange(server, _request(*lines))
    assert status == 431 and "max_header_size (65536 bytes)" in body["message"]
    _healthy(server)


def test_a_huge_header_is_refused_while_it_is_still_arriving(server: ServerProcess) -> None:
    """An 8 MB header (accepted whole before: 64 MB of one took 9 s and 160 MB of RSS that never came back)."""
    rss_before = _rss_mb(server)
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=TIMEOUT) as sock:
        # the server may answer and stop reading before all is sent: what counts is the answer below
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nx-big: " + b"a" * (8 << 20))
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]
    assert _rss_mb(server) - rss_before < 20
    _healthy(server)


def test_more_than_100_headers_are_431(server: ServerProcess) -> None:
    hundred = [b"connection: close", *(b"x-%d: 1" % i for i in range(98))]  # + host: 100 header lines
    assert _exchange(server, _request(*hundred))[0] == 200
    status, body = _exchange(server, _request(*hundred, b"x-last: 1"))
    assert status == 431 and "max_header_count (100)" in body["message"]


def test_a_request_line_over_16_kib_is_414(server: ServerProcess) -> None:
    status, body = _exchange(server, _request(path=b"/ping?" + b"a" * (16 * 1024)))
    assert status == 414 and "max_header_line_size" in body["message"]
    _healthy(server)


def test_slow_headers_are_cut_off_after_header_read_timeout(server: ServerProcess) -> None:
    """50 connections that never finish their headers, and 5 that send nothing: all closed after the timeout
    (408 for those that sent part of a request), while a normal client is answered throughout."""
    port = _port(server)
    slow = [socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) for _ in range(50)]
    silent = [socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) for _ in range(5)]
    try:
        for sock in slow:
            sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nx-slow: ")
        opened = time.monotonic()
        while time.monotonic() - opened < HEADER_TIMEOUT / 2:
            _healthy(server)
            time.sleep(0.1)
        for sock in slow:
            answer = _read_until_closed(sock, HEADER_TIMEOUT + TIMEOUT)
            assert answer.startswith(b"HTTP/1.1 408 "), answer[:100]
        for sock in silent:
            assert _read_until_closed(sock, HEADER_TIMEOUT + TIMEOUT) == b""
        assert time.monotonic() - opened > HEADER_TIMEOUT * 0.8
        _healthy(server)
    finally:
        for sock in slow + silent:
            sock.close()


def test_idle_connections_are_bounded_in_number(server: ServerProcess) -> None:
    """MAX_IDLE + 10 connections that send nothing: the 10 opened first are closed at once; the rest stay open
    (until the header-read timeout, 10 s: time enough to look on a loaded machine) and a normal client is still
    answered."""
    port = _port(server)
    conns = []
    try:
        for _ in range(MAX_IDLE + 10):
            conns.append(socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT))
            time.sleep(0.01)  # accepted in this order
        time.sleep(0.3)
        for sock in conns[:10]:
            assert _read_until_closed(sock, HEADER_TIMEOUT / 2) == b""  # at once, not at the header timeout
        for sock in conns[-5:]:
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):  # still open, nothing to read
                sock.recv(1)
        _healthy(server)
    finally:
        for sock in conns:
            sock.close()


def test_an_idle_keep_alive_connection_is_closed_after_keep_alive_timeout(server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=TIMEOUT) as sock:
        sock.sendall(_request())
        sent = time.monotonic()
        assert _read_until_closed(sock, TIMEOUT).startswith(b"HTTP/1.1 200 ")
        assert KEEP_ALIVE * 0.8 < time.monotonic() - sent < HEADER_TIMEOUT  # keep-alive's close, not the header's


def _rss_mb(server: ServerProcess) -> float:
    assert server.proc is not None
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1]) / 1024
