"""gRPC status codes say whose fault it is, on serve's own gRPC server (native.Server, call.py).

The client's faults are INVALID_ARGUMENT and log nothing: a `grpc-timeout` that is not PROTOCOL-HTTP2.md's
TimeoutValue (1-8 ASCII digits) and TimeoutUnit, a compressed message cut short or followed by bytes, a message
that does not deserialize. Ours stays UNKNOWN with a traceback (grpc.aio's answer to a servicer's exception). A
deadline that passes is DEADLINE_EXCEEDED, never UNAVAILABLE (which clients retry), also on uvloop, whose loop
clock lags time.monotonic() by up to a loop turn.

grpcio's server answers the same requests otherwise (checked with grpcio 1.85): grpc-c says INTERNAL "Error parsing
'grpc-timeout' metadata" (and takes 9 digits and a leading space), INTERNAL "Decompression failed", and grpc.aio
UNKNOWN with a traceback for a message that does not parse. Those answers are grpc-c's, so these cases drive our
server only, with raw HTTP/2 (h2), since grpc's clients cannot send a malformed grpc-timeout.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2

pytest.importorskip("h2")
import h2.config
import h2.connection
import h2.events

from serve.frontends.grpc.native import Server

CHECK = "/test.Status/Check"  # a health_pb2.HealthCheckRequest -> HealthCheckResponse method
RAN: list[str] = []
INVALID = str(grpc.StatusCode.INVALID_ARGUMENT.value[0])
DEADLINE = str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0])


async def _check(request: health_pb2.HealthCheckRequest, context: Any) -> health_pb2.HealthCheckResponse:
    RAN.append(request.service)
    if request.service == "fail":
        raise RuntimeError("the servicer's own bug")
    if request.service.startswith("sleep"):
        await asyncio.sleep(float(request.service[5:]))
    if request.service == "swallow":  # a handler that turns its cancellation into another error
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            raise RuntimeError("cancelled, and said otherwise") from None
    return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


async def _collect(requests: AsyncIterator[health_pb2.HealthCheckRequest], context: Any) -> Any:
    """A client-streaming handler that turns every error of its request stream into INTERNAL."""
    try:
        services = [request.service async for request in requests]
    except Exception as exc:
        await context.abort(grpc.StatusCode.INTERNAL, f"the servicer's reading failed: {exc}")
    return health_pb2.HealthCheckResponse(status=len(services))


def _server() -> Server:
    server = Server()
    request, response = health_pb2.HealthCheckRequest.FromString, health_pb2.HealthCheckResponse.SerializeToString
    handlers = {
        "Check": grpc.unary_unary_rpc_method_handler(_check, request, response),
        "Collect": grpc.stream_unary_rpc_method_handler(_collect, request, response),
    }
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("test.Status", handlers)])
    return server


def _message(payload: bytes, compressed: bool = False) -> bytes:
    return (b"\x01" if compressed else b"\x00") + len(payload).to_bytes(4, "big") + payload


def _request(service: str) -> bytes:
    return _message(health_pb2.HealthCheckRequest(service=service).SerializeToString())


class Client:
    """One raw HTTP/2 connection (h2) that sends any header value and reads each stream's status."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        config = h2.config.H2Configuration(
            client_side=True,
            header_encoding="latin-1",
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
        )
        self.h2 = h2.connection.H2Connection(config)
        self.h2.initiate_connection()
        self.status: dict[int, dict[str, str]] = {}
        self.ended: set[int] = set()

    def call(self, body: bytes, path: str = CHECK, **headers: str) -> int:
        stream = self.h2.get_next_available_stream_id()
        fields = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "test"),
                  ("content-type", "application/grpc"), ("te", "trailers"),
                  *((k.replace("_", "-"), v) for k, v in headers.items())]  # fmt: skip
        self.h2.send_headers(stream, [(k.encode(), v.encode("latin-1")) for k, v in fields])
        self.h2.send_data(stream, body, end_stream=True)
        self.writer.write(self.h2.data_to_send())
        return stream

    async def wait(self, streams: list[int], seconds: float = 30) -> None:
        """Read until every stream in `streams` ended (a generous bound: the machine may be loaded)."""
        async with asyncio.timeout(seconds):
            while not set(streams) <= self.ended:
                data = await self.reader.read(65536)
                assert data, "the server closed the connection"
                for event in self.h2.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                        self.status.setdefault(event.stream_id, {}).update(dict(event.headers))
                    elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                        self.ended.add(event.stream_id)
                    elif isinstance(event, h2.events.DataReceived):
                        self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                self.writer.write(self.h2.data_to_send())

    def code(self, stream: int) -> str:
        return self.status.get(stream, {}).get("grpc-status", "none")


def run(test: Callable[[Client], Awaitable[None]], runner: Callable[[Any], Any] = asyncio.run) -> None:
    async def main() -> None:
        server = _server()
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await test(Client(reader, writer))
        finally:
            writer.close()
            await server.stop(0)

    RAN.clear()
    runner(main())


def _errors_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


MALFORMED_TIMEOUTS = ["\xb2S", "", "S", "m", "200", "1x", "1s", "123456789S", "-1S", "+1S", "1 S", "1.5S",
                      "\u0661S".encode().decode("latin-1"), "0x1fS"]  # fmt: skip


def test_a_malformed_grpc_timeout_is_the_clients_error(caplog: pytest.LogCaptureFixture) -> None:
    """Each malformed shape is INVALID_ARGUMENT naming grpc-timeout, before the handler runs; `\\xb2S` (str.isdigit()
    says yes, int() no) raised ValueError inside the server and reset the stream. The well-formed limits pass."""

    async def test(client: Client) -> None:
        bad = {value: client.call(_request("bad"), grpc_timeout=value) for value in MALFORMED_TIMEOUTS}
        good = [client.call(_request("good"), grpc_timeout=value) for value in ("99999999n", "12345678H", "1S")]
        await client.wait([*bad.values(), *good])
        for value, stream in bad.items():
            assert client.code(stream) == INVALID, (value, client.status.get(stream))
            assert "grpc-timeout" in client.status[stream]["grpc-message"]
        assert [client.code(s) for s in good] == ["0", "0", "0"]
        assert RAN == ["good"] * 3

    with caplog.at_level(logging.INFO):
        run(test)
    assert _errors_logged(caplog) == []


def test_a_deadline_already_past_is_deadline_exceeded_without_running_the_handler() -> None:
    async def test(client: Client) -> None:
        streams = [client.call(_request("late"), grpc_timeout=value) for value in ("0m", "0n", "0H")]
        await client.wait(streams)
        assert [client.code(s) for s in streams] == [DEADLINE] * 3
        assert RAN == []

    run(test)


def test_a_compressed_message_cut_short_or_with_bytes_after_it_is_the_clients_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A cut-short stream decompressed to a prefix that parsed, and the call answered OK with the wrong request."""

    async def test(client: Client) -> None:
        payload = health_pb2.HealthCheckRequest(service="x" * 40).SerializeToString()
        deflated, gzipped = zlib.compress(payload), gzip.compress(payload)
        cases = {
            "deflate cut short": client.call(_message(deflated[:-4], True), grpc_encoding="deflate"),
            "gzip cut short": client.call(_message(gzipped[:-8], True), grpc_encoding="gzip"),
            "gzip with bytes after it": client.call(_message(gzipped + b"junk", True), grpc_encoding="gzip"),
            "not gzip": client.call(_message(b"not gzip", True), grpc_encoding="gzip"),
        }
        whole = client.call(_message(gzipped, True), grpc_encoding="gzip")
        await client.wait([*cases.values(), whole])
        for case, stream in cases.items():
            assert client.code(stream) == INVALID, (case, client.status.get(stream))
        assert client.code(whole) == "0"
        assert RAN == ["x" * 40]

    with caplog.at_level(logging.INFO):
        run(test)
    assert _errors_logged(caplog) == []


def test_a_message_that_does_not_deserialize_is_the_clients_error_and_a_servicer_bug_is_ours(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The deserializer runs inside the handler's read; a handler that turns what it read into INTERNAL does not
    change whose fault it is. A servicer's own exception is UNKNOWN, grpc.aio's wording, with its traceback."""

    async def test(client: Client) -> None:
        unary = client.call(_message(b"\xff\xff\xff"))
        streamed = client.call(_request("one") + _message(b"\x0a\x09cut"), path="/test.Status/Collect")
        await client.wait([unary, streamed])
        for stream in (unary, streamed):
            assert client.code(stream) == INVALID, client.status.get(stream)
            assert "HealthCheckRequest" in client.status[stream]["grpc-message"]
        assert _errors_logged(caplog) == []
        bug = client.call(_request("fail"))
        await client.wait([bug])
        assert client.code(bug) == str(grpc.StatusCode.UNKNOWN.value[0])
        assert "the servicer's own bug" in client.status[bug]["grpc-message"]

    with caplog.at_level(logging.INFO):
        run(test)
    assert RAN == ["fail"]
    failures = [r for r in caplog.records if r.exc_info]
    assert len(failures) == 1 and "/test.Status/Check" in failures[0].getMessage()


def _uvloop_run(main: Any) -> Any:
    uvloop = pytest.importorskip("uvloop")
    return uvloop.run(main)


def test_a_deadline_that_passes_is_deadline_exceeded_never_unavailable_on_uvloop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """uvloop keeps time in whole milliseconds (loop.time() and its timers), so a deadline timer can fire up to a
    millisecond before time.monotonic() reaches the deadline. The server compared the two clocks after the cancel and
    answered 4 to 10 of these 50 calls UNAVAILABLE ("the server is shutting down"), which clients retry. A handler
    that turns its cancellation into another error still ends DEADLINE_EXCEEDED, with nothing logged."""

    async def test(client: Client) -> None:
        streams = [client.call(_request("sleep5"), grpc_timeout=f"{100 + 3 * i}m") for i in range(50)]
        swallowed = client.call(_request("swallow"), grpc_timeout="150m")
        await client.wait([*streams, swallowed])
        codes = [client.code(s) for s in streams]
        assert codes == [DEADLINE] * len(streams), [client.status.get(s) for s in streams if client.code(s) != DEADLINE]
        assert client.code(swallowed) == DEADLINE

    with caplog.at_level(logging.INFO):
        run(test, _uvloop_run)
    assert _errors_logged(caplog) == []
