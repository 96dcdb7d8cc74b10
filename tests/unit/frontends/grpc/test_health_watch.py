"""grpc.health.v1.Health/Watch on both gRPC servers, with grpcio's own health stub as the client (health.proto's
contract: the status at once, then each change, until the client cancels; SERVICE_UNKNOWN as a message)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from serve.frontends import DataPlane
from serve.frontends.grpc import health
from serve.frontends.grpc.health import NOT_SERVING, SERVICE_UNKNOWN, SERVING, HealthServicer
from serve.frontends.grpc.server import bound_port, create_grpc_servers, stop_grpc_server
from serve.frontends.http import TokenAuth
from serve.metrics import ServerMetrics
from tests.unit.frontends.fakes import FakeRegistry, settings
from tests.unit.frontends.grpc import harness
from tests.unit.frontends.grpc.harness import Env, run

BOTH_SERVERS = pytest.mark.usefixtures("grpc_server")  # on serve's gRPC server and grpcio's
WAIT = 5.0  # seconds a change may take to arrive (WATCH_INTERVAL is 0.02 s here): generous for a loaded machine


@pytest.fixture(autouse=True)
def fast_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health, "WATCH_INTERVAL", 0.02)


async def _next(stream: Any) -> int:
    response = await asyncio.wait_for(stream.read(), WAIT)
    assert response is not grpc.aio.EOF
    return int(response.status)


@BOTH_SERVERS
def test_watch_sends_the_status_then_each_change(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        stub = health_pb2_grpc.HealthStub(env.inference)
        whole, service = (
            stub.Watch(health_pb2.HealthCheckRequest()),
            stub.Watch(health_pb2.HealthCheckRequest(service="inference.GRPCInferenceService")),
        )
        assert [await _next(whole), await _next(service)] == [SERVING, SERVING]
        env.registry.healthy = False  # a model lost its last worker
        assert [await _next(whole), await _next(service)] == [NOT_SERVING, NOT_SERVING]
        env.registry.healthy = True
        assert [await _next(whole), await _next(service)] == [SERVING, SERVING]
        whole.cancel()
        service.cancel()
        management = health_pb2_grpc.HealthStub(env.management).Watch(health_pb2.HealthCheckRequest())
        assert await _next(management) == SERVING  # the management API needs no model
        management.cancel()

    run(test, tmp_path)


@BOTH_SERVERS
def test_watch_of_an_unknown_service_says_so_and_stays_open(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        stub = health_pb2_grpc.HealthStub(env.inference)
        unknown = stub.Watch(health_pb2.HealthCheckRequest(service="no.such.Service"))
        assert await _next(unknown) == SERVICE_UNKNOWN
        with pytest.raises(TimeoutError):  # not an error, and nothing else follows
            await asyncio.wait_for(asyncio.shield(unknown.read()), 0.2)
        assert not unknown.done()
        unknown.cancel()
        assert await unknown.code() == grpc.StatusCode.CANCELLED
        check = await stub.Check(health_pb2.HealthCheckRequest())  # the server serves on
        assert check.status == SERVING

    run(test, tmp_path)


def test_a_sampler_runs_only_while_someone_watches_and_shutdown_ends_every_watch() -> None:
    async def main() -> None:
        servicer = HealthServicer(lambda: True, ["test.Service"])
        watches = [servicer.Watch(health_pb2.HealthCheckRequest(service=name), None)  # type: ignore[arg-type]
                   for name in ("", "test.Service", "no.such.Service")]  # fmt: skip
        firsts = [(await anext(w)).status for w in watches]
        assert firsts == [SERVING, SERVING, SERVICE_UNKNOWN]
        sampler = servicer._sampler
        assert sampler is not None and not sampler.done()
        pending = [asyncio.ensure_future(anext(w)) for w in watches]
        await asyncio.sleep(0.05)
        assert not any(p.done() for p in pending)  # no change, nothing sent
        servicer.enter_graceful_shutdown()
        done = await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), WAIT)
        assert [d.status for d in done[:2]] == [NOT_SERVING, NOT_SERVING]
        assert isinstance(done[2], StopAsyncIteration)  # the unknown service's watch ends without a message
        for watch in watches[:2]:
            with pytest.raises(StopAsyncIteration):
                await anext(watch)
        await asyncio.wait_for(sampler, WAIT)  # no watcher left: the sampler ends
        assert servicer._watchers == 0
        assert servicer.status() == NOT_SERVING

    asyncio.run(main())


@BOTH_SERVERS
def test_stopping_a_server_ends_its_watches_with_not_serving(tmp_path: Path) -> None:
    """A Watch never ends on its own: stop_grpc_server sends its watchers NOT_SERVING and ends their calls, so the
    stop does not wait out its grace period (60 s here) for them."""
    config = settings(tmp_path, grpc_inference_port=0, grpc_management_port=0, grpc_server=harness.IMPLEMENTATION)
    dataplane = DataPlane(FakeRegistry(), ServerMetrics(hostname="testhost"), config)

    async def main() -> None:
        servers = create_grpc_servers(dataplane, config, TokenAuth.from_settings(config))
        for server in servers:
            await server.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{bound_port(servers[0])}") as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
            assert await _next(watch) == SERVING
            stopping = asyncio.gather(*(stop_grpc_server(server, 60) for server in servers))
            assert await _next(watch) == NOT_SERVING
            assert await asyncio.wait_for(watch.read(), WAIT) is grpc.aio.EOF
            assert await watch.code() == grpc.StatusCode.OK
            await asyncio.wait_for(stopping, 30)  # nothing holds the servers for their 60 s

    asyncio.run(asyncio.wait_for(main(), 50))
