"""The attacks of issue 24 on a gRPC server's HTTP/2 port, as asyncio clients of raw frames, and the probes that say
whether other clients are hurt meanwhile. Used by bench/http2_hostile.py (the figures) and
tests/integration/test_hostile_http2.py (the same attacks, smaller, with assertions).

Each attack runs until the server closes its connection(s) or `seconds` pass, and returns an `Outcome`: what it
sent, whether and how the server cut it off. Attacks:
- `window_flood`: streams each announcing a large message and sending 16 KiB DATA frames round-robin, ignoring
  every window (the server must answer FLOW_CONTROL_ERROR once a window is spent, and hold at most its budget);
- `idle_flood(kind)`: frames that do no work, without reading anything: zero-length CONTINUATION, empty DATA,
  WINDOW_UPDATE +1, SETTINGS, PING (the server must end the connection with ENHANCE_YOUR_CALM);
- `hoard`: many connections, each holding an unfinished request stream (headers and half a message, then
  silence), held for `seconds` (the server must keep answering others: evict them or time them out);
- `header_trickle`: connections sending a header block one byte at a time (closed by the header timeout);
- `idle_burst`: connections opened as fast as possible, each sending only the preface (the server must keep at most
  max_idle_connections of them).
`Probe` asks REST `/ping` on a new connection and gRPC `Ping` on a kept channel every PROBE_INTERVAL and keeps
each answer's latency (or the error).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import statistics
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from serve.frontends.grpc.http2.hpack import encode

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 4, 6, 7, 8, 9
END_STREAM, END_HEADERS = 0x1, 0x4
PROBE_INTERVAL = 0.1
PREDICTIONS = "/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions"
REQUEST_BLOCK = encode([(":method", "POST"), (":scheme", "http"), (":path", PREDICTIONS), (":authority", "serve"),
                        ("content-type", "application/grpc"), ("te", "trailers")])  # fmt: skip


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


@dataclass
class Outcome:
    sent_bytes: int = 0  # handed to the socket (some may never have left the client)
    sent_frames: int = 0
    closed_by_server: int = 0  # connections the server closed
    goaway_codes: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        codes = sorted(set(self.goaway_codes))
        return (f"wrote {self.sent_bytes / 1e6:.1f} MB ({self.sent_frames} frames) in {self.seconds:.1f} s; "
                f"{self.closed_by_server} connection(s) closed by the server, GOAWAY codes {codes}")  # fmt: skip


class _Peer:
    """One raw connection: writes without waiting for the server, reads (or not) in the background."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, read: bool) -> None:
        self.reader, self.writer = reader, writer
        self.closed = False
        self.goaway: int | None = None
        self._buffer = b""
        self._reader = asyncio.get_running_loop().create_task(self._read()) if read else None

    @classmethod
    async def open(cls, host: str, port: int, read: bool = True, rcvbuf: int | None = None) -> _Peer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
        reader, writer = await asyncio.open_connection(sock=sock)
        return cls(reader, writer, read)

    async def _read(self) -> None:
        with contextlib.suppress(OSError):
            while chunk := await self.reader.read(1 << 16):
                self._buffer += chunk
                while len(self._buffer) >= 9 and len(self._buffer) >= 9 + int.from_bytes(self._buffer[:3], "big"):
                    length, kind = int.from_bytes(self._buffer[:3], "big"), self._buffer[3]
                    if kind == GOAWAY:
                        self.goaway = struct.unpack(">I", self._buffer[13:17])[0]
                    self._buffer = self._buffer[9 + length :]
        self.closed = True

    async def send(self, data: bytes, outcome: Outcome, frames: int) -> bool:
        """Write `data` (`frames` frames); False once the server has closed the connection."""
        if self.closed or self.writer.is_closing():
            return False
        self.writer.write(data)
        outcome.sent_bytes += len(data)
        outcome.sent_frames += frames
        with contextlib.suppress(TimeoutError, OSError):
            await asyncio.wait_for(self.writer.drain(), 0.05)
        return not self.closed

    def close(self, outcome: Outcome) -> None:
        if self.closed:
            outcome.closed_by_server += 1
        if self.goaway is not None:
            outcome.goaway_codes.append(self.goaway)
        if self._reader is not None:
            self._reader.cancel()
        self.writer.transport.abort()


async def window_flood(host: str, port: int, streams: int = 256, message: int = 6_000_000,
                       seconds: float = 12.0) -> Outcome:  # fmt: skip
    outcome, start = Outcome(), time.monotonic()
    peer = await _Peer.open(host, port)
    ids = range(1, 2 * streams, 2)
    opening = PREFACE + frame(SETTINGS, 0, 0, b"") + b"".join(frame(HEADERS, END_HEADERS, s, REQUEST_BLOCK) +
                                                              frame(DATA, 0, s, b"\0" + message.to_bytes(4, "big"))
                                                              for s in ids)  # fmt: skip
    await peer.send(opening, outcome, 1 + 2 * streams)
    chunk = b"d" * 16384
    sent = dict.fromkeys(ids, 0)
    while time.monotonic() - start < seconds and not peer.closed:
        burst = b"".join(frame(DATA, 0, s, chunk) for s in ids if sent[s] < message)  # one frame per stream
        if not burst:
            break
        for s in ids:
            sent[s] += len(chunk)
        if not await peer.send(burst, outcome, len(ids)):
            break
    await _until_closed(peer, 3)
    outcome.seconds = time.monotonic() - start
    peer.close(outcome)
    return outcome


def _idle_frames(kind: str) -> tuple[bytes, bytes]:
    """(what opens the flood, 1,000 of the flood's frames)."""
    opening = PREFACE + frame(SETTINGS, 0, 0, b"")
    if kind == "continuation":
        return opening + frame(HEADERS, 0, 1, REQUEST_BLOCK), frame(CONTINUATION, 0, 1, b"") * 1000
    if kind == "empty-data":
        return opening + frame(HEADERS, END_HEADERS, 1, REQUEST_BLOCK), frame(DATA, 0, 1, b"") * 1000
    if kind == "window-update":
        return opening, frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1)) * 1000
    if kind == "settings":
        return opening, frame(SETTINGS, 0, 0, b"") * 1000
    if kind == "ping":
        return opening, frame(PING, 0, 0, b"12345678") * 1000
    raise ValueError(f"unknown flood {kind!r}")


IDLE_KINDS = ("continuation", "empty-data", "window-update", "settings", "ping")


async def idle_flood(host: str, port: int, kind: str, seconds: float = 10.0) -> Outcome:
    """Frames that do no work, as fast as the socket takes them. The PING flood reads nothing (with a tiny receive
    buffer), so the acknowledgements back up; the others read what the server sends."""
    outcome, start = Outcome(), time.monotonic()
    unread = kind == "ping"
    peer = await _Peer.open(host, port, read=not unread, rcvbuf=4096 if unread else None)
    opening, thousand = _idle_frames(kind)
    await peer.send(opening, outcome, 2)
    while time.monotonic() - start < seconds:
        if peer.writer.is_closing():
            break
        try:
            peer.writer.write(thousand)
            await asyncio.wait_for(peer.writer.drain(), 0.5)
        except TimeoutError:
            continue  # the server stopped reading us
        except OSError:
            peer.closed = True
            break
        outcome.sent_bytes += len(thousand)
        outcome.sent_frames += 1000
    if not peer.closed:  # read now: did the server end it, and how?
        peer._reader = asyncio.get_running_loop().create_task(peer._read())
        await _until_closed(peer, 3)
    outcome.seconds = time.monotonic() - start
    peer.close(outcome)
    return outcome


async def hoard(host: str, port: int, connections: int = 1100, seconds: float = 10.0) -> Outcome:
    """Connections each holding an unfinished request: headers and half a message, then silence."""
    outcome, start = Outcome(), time.monotonic()
    peers: list[_Peer] = []
    unfinished = (PREFACE + frame(SETTINGS, 0, 0, b"") + frame(HEADERS, END_HEADERS, 1, REQUEST_BLOCK) +
                  frame(DATA, 0, 1, b"\0\0\0\x10\0" + b"h" * 100))  # fmt: skip
    for _ in range(connections):
        try:
            peer = await asyncio.wait_for(_Peer.open(host, port), 5)
        except (OSError, TimeoutError):
            outcome.closed_by_server += 1  # refused: the server (or the kernel's backlog) is full
            continue
        peers.append(peer)
        await peer.send(unfinished, outcome, 4)
    await asyncio.sleep(max(0.0, seconds - (time.monotonic() - start)))
    outcome.seconds = time.monotonic() - start
    for peer in peers:
        peer.close(outcome)
    return outcome


async def header_trickle(host: str, port: int, connections: int = 20, seconds: float = 15.0) -> Outcome:
    outcome, start = Outcome(), time.monotonic()
    peers = [await _Peer.open(host, port) for _ in range(connections)]
    block = frame(HEADERS, 0, 1, REQUEST_BLOCK[:1]) + b"".join(frame(CONTINUATION, 0, 1, REQUEST_BLOCK[i : i + 1])
                                                               for i in range(1, len(REQUEST_BLOCK)))  # fmt: skip
    for peer in peers:
        await peer.send(PREFACE + frame(SETTINGS, 0, 0, b""), outcome, 1)
    await asyncio.sleep(0.2)  # the server's SETTINGS acknowledged before the block starts
    position = 0
    while time.monotonic() - start < seconds and not all(p.closed for p in peers) and position < len(block):
        for peer in peers:
            await peer.send(block[position : position + 1], outcome, 0)
        position += 1
        await asyncio.sleep(0.2)
    outcome.seconds = time.monotonic() - start
    for peer in peers:
        peer.close(outcome)
    return outcome


async def idle_burst(host: str, port: int, connections: int = 3000, settle: float = 3.0) -> tuple[Outcome, int]:
    """(the outcome, how many of the connections the server still holds open after `settle` seconds)."""
    outcome, start = Outcome(), time.monotonic()
    peers: list[_Peer] = []
    for _ in range(connections):
        try:
            peer = await asyncio.wait_for(_Peer.open(host, port), 5)
        except (OSError, TimeoutError):
            continue
        peers.append(peer)
        peer.writer.write(PREFACE + frame(SETTINGS, 0, 0, b""))
    await asyncio.sleep(settle)
    still_open = sum(not p.closed for p in peers)
    outcome.seconds = time.monotonic() - start
    for peer in peers:
        peer.close(outcome)
    return outcome, still_open


async def _until_closed(peer: _Peer, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not peer.closed and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


class Probe:
    """REST GET /ping (a new connection each time, as a readiness probe) and gRPC Ping, every PROBE_INTERVAL, in a
    thread of its own; `latencies` and `errors` per kind."""

    def __init__(self, rest_port: int, grpc_target: str, timeout: float = 10.0) -> None:
        self.rest_port, self.grpc_target, self.timeout = rest_port, grpc_target, timeout
        self.latencies: dict[str, list[float]] = {"rest": [], "grpc": []}
        self.errors: dict[str, list[str]] = {"rest": [], "grpc": []}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        import grpc
        from google.protobuf import empty_pb2

        from serve.frontends.grpc.generated import inference_pb2_grpc

        with grpc.insecure_channel(self.grpc_target) as channel:
            stub = inference_pb2_grpc.InferenceAPIsServiceStub(channel)
            while not self._stop.is_set():
                self._time("rest", self._ping)
                self._time("grpc", lambda: stub.Ping(empty_pb2.Empty(), timeout=self.timeout))
                self._stop.wait(PROBE_INTERVAL)

    def _ping(self) -> None:
        import http.client

        connection = http.client.HTTPConnection("127.0.0.1", self.rest_port, timeout=self.timeout)
        try:
            connection.request("GET", "/ping")
            status = connection.getresponse().status
        finally:
            connection.close()
        if status != 200:
            raise RuntimeError(f"/ping answered {status}")

    def _time(self, kind: str, call: Callable[[], object]) -> None:
        start = time.perf_counter()
        try:
            call()
        except Exception as exc:  # every failure is a finding, kept with its text
            self.errors[kind].append(f"{type(exc).__name__}: {str(exc)[:120]}")
            return
        self.latencies[kind].append(time.perf_counter() - start)

    def summary(self) -> str:
        parts = []
        for kind in ("rest", "grpc"):
            values = self.latencies[kind]
            if values:
                parts.append(f"{kind} p50 {statistics.median(values) * 1000:.0f} ms, max {max(values) * 1000:.0f} ms "
                             f"({len(values)} ok, {len(self.errors[kind])} failed)")  # fmt: skip
            else:
                parts.append(f"{kind}: none answered ({len(self.errors[kind])} failed)")
        return "; ".join(parts)


class RssSampler:
    """The resident memory of process `pid`, sampled every 0.1 s in a thread: `peak` and `last` in bytes."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = self.last = rss(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.last = rss(self.pid)
            self.peak = max(self.peak, self.last)


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))
