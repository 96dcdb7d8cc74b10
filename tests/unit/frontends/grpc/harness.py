"""In-process gRPC servers (create_grpc_servers) over the FakeRegistry, bound to 127.0.0.1 port 0, and channels.

run(test, tmp_path)   # test(env) with env.inference / env.management channels; bounded to 10 s

The servers are of the implementation `IMPLEMENTATION` names (`grpc_server`: serve's own or grpcio's): the
`grpc_server` fixture (conftest.py) runs each test that uses it once on each.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from serve.frontends import DataPlane
from serve.frontends.grpc.server import bound_port, create_grpc_servers
from serve.frontends.http import TokenAuth
from serve.metrics import ServerMetrics
from tests.unit.frontends.fakes import FakeRegistry, settings

IMPLEMENTATIONS = ("serve", "grpcio")
IMPLEMENTATION = "serve"


@dataclasses.dataclass
class Env:
    registry: FakeRegistry
    auth: TokenAuth
    inference: grpc.aio.Channel
    management: grpc.aio.Channel
    inference_target: str  # host:port, for a channel with other options


def run(test: Callable[[Env], Awaitable[None]], tmp_path: Path, registry: FakeRegistry | None = None,
        **overrides: Any) -> None:  # fmt: skip
    overrides.setdefault("grpc_server", IMPLEMENTATION)
    config = settings(tmp_path, grpc_inference_port=0, grpc_management_port=0, **overrides)
    registry = registry or FakeRegistry()
    dataplane = DataPlane(registry, ServerMetrics(hostname="testhost"), config)
    auth = TokenAuth.from_settings(config)

    async def main() -> None:
        servers = create_grpc_servers(dataplane, config, auth)
        for server in servers:
            await server.start()
        target = f"127.0.0.1:{bound_port(servers[0])}"
        try:
            async with (
                grpc.aio.insecure_channel(target) as inference,
                grpc.aio.insecure_channel(f"127.0.0.1:{bound_port(servers[1])}") as management,
            ):
                await test(Env(registry, auth, inference, management, target))
        finally:
            await asyncio.gather(*(server.stop(0) for server in servers))

    asyncio.run(asyncio.wait_for(main(), timeout=10))
