"""The composition root: Settings -> ServerMetrics -> ModelRegistry -> DataPlane -> the three REST listeners and the
two gRPC servers (inference 7070, management 7071).

`run(settings)` serves in the foreground until SIGTERM or SIGINT, then drains: every listener stops accepting
connections and finishes the requests it has (uvicorn's and grpc's graceful shutdown, bounded), the registry answers
what is queued and stops its workers (bounded by `unregister_model_timeout`), the key file is removed, and it returns 0.
The listeners share one event loop with the registry, so a request in flight is never cut off by its own worker
going away first.

The server binds its REST sockets itself before uvicorn serves them, so a port 0 in an address (and
grpc_*_port=0) takes a free port chosen by the system with no window in which another process can take it; the
ports it got go to the log line "serve is up" and, when `ports_file` is set, to that file as JSON. Each REST
listener runs uvicorn's httptools protocol with the connection limits of
serve/frontends/http/connection_limits.py (header size and count, header-read timeout, idle connections). REST and
gRPC connections count against one `max_connections` (serve/frontends/connections.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp

from serve.config import Settings, parse_address
from serve.errors import ConfigError
from serve.frontends.connections import OpenConnections
from serve.frontends.dataplane import DataPlane
from serve.frontends.grpc.server import bound_port, create_grpc_servers, stop_grpc_server
from serve.frontends.http.app import create_inference_app, create_management_app, create_metrics_app
from serve.frontends.http.auth import TokenAuth
from serve.frontends.http.connection_limits import ConnectionLimits, limited_http_protocol
from serve.management.registry import ModelRegistry
from serve.metrics import ServerMetrics
from serve.metrics.configure import start_default_metrics
from serve.workflows import WorkflowManager

logger = logging.getLogger(__name__)
# seconds a listener waits for its open requests to finish after SIGTERM (the registry adds its own drain)
GRACEFUL_SECONDS = 30


class _Listener(uvicorn.Server):
    """A uvicorn server that leaves signals to `run`: several listeners share one loop and one drain."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _listener(app: ASGIApp, address: str, settings: Settings, key: str,
              connections: OpenConnections) -> tuple[_Listener, socket.socket]:  # fmt: skip
    """A uvicorn server for `app` and the socket it will serve, bound now (ConfigError when it cannot be)."""
    host, port, tls = parse_address(address)
    cert, keyfile = (settings.certificate_file, settings.private_key_file) if tls else (None, None)
    limits = ConnectionLimits(settings.max_header_line_size, settings.max_header_size, settings.max_header_count,
                              settings.header_read_timeout, settings.max_idle_connections)  # fmt: skip
    protocol = limited_http_protocol(limits, connections)
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, lifespan="off",
                            timeout_graceful_shutdown=GRACEFUL_SECONDS, ssl_certfile=cert, ssl_keyfile=keyfile,
                            http=protocol, timeout_keep_alive=settings.keep_alive_timeout)  # type: ignore[arg-type]  # fmt: skip
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=config.backlog)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {address}: {exc.strerror or exc}. Set {key} in config.properties to a "
                          "free local address and port (port 0: any free port)") from None  # fmt: skip
    return _Listener(config), sock


async def serve(settings: Settings, started: asyncio.Event | None = None) -> int:
    """Run the server until a stop signal (or `stop` below) and drain; the exit code."""
    metrics = ServerMetrics()
    system = start_default_metrics(metrics, settings)  # metrics_mode, metrics_config, the host gauges' sampler
    registry = ModelRegistry(settings, metrics)
    dataplane = DataPlane(registry, metrics, settings)
    workflows = dataplane.workflows = WorkflowManager(registry, settings, submit=dataplane.predict)
    auth = TokenAuth.from_settings(settings)
    apps = {"inference": create_inference_app(dataplane, settings, auth),
            "management": create_management_app(dataplane, settings, auth)}  # fmt: skip
    if settings.enable_metrics_api:
        apps["metrics"] = create_metrics_app(metrics, settings)
    bound: dict[str, tuple[_Listener, socket.socket]] = {}
    connections = OpenConnections(settings.max_connections or None)  # REST's and gRPC's, under one cap
    try:
        for name, app in apps.items():
            address = getattr(settings, f"{name}_address")
            bound[name] = _listener(app, address, settings, f"{name}_address", connections)
    except ConfigError:
        for _, sock in bound.values():
            sock.close()
        raise
    listeners = [listener for listener, _ in bound.values()]
    ports = {name: sock.getsockname()[1] for name, (_, sock) in bound.items()}
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread (tests)
            loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(listener.serve(sockets=[sock])) for listener, sock in bound.values()]
    grpc_servers: list = []
    try:
        grpc_servers = create_grpc_servers(dataplane, settings, auth, connections)  # a port it cannot bind: ConfigError
        for grpc_server in grpc_servers:
            await grpc_server.start()
        ports.update(zip(("grpc_inference", "grpc_management"), map(bound_port, grpc_servers), strict=True))
        _write_ports(settings, ports)
        await registry.start()
        if started is not None:
            started.set()
        _log_up(registry, ", ".join(f"{name} {listener.config.host}:{ports[name]}"
                                    for name, (listener, _) in bound.items()))  # fmt: skip
        await _until_stopped(stop, tasks)
    finally:
        for listener in listeners:
            listener.should_exit = True
        stopping = (stop_grpc_server(s, GRACEFUL_SECONDS) for s in grpc_servers)
        await asyncio.gather(*tasks, *stopping, return_exceptions=True)
        await registry.shutdown(settings.unregister_model_timeout)
        await workflows.shutdown()
        auth.remove_key_file()
        if system is not None:
            system.stop()
    failed = [t.exception() for t in tasks if t.done() and not t.cancelled() and t.exception()]
    return 1 if failed else 0


def _write_ports(settings: Settings, ports: dict[str, int]) -> None:
    """The bound ports as JSON in `ports_file`, written whole (a reader never sees half a file)."""
    if settings.ports_file is None:
        return
    path = settings.ports_file
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(ports))
    os.replace(partial, path)
    logger.info("ports: %s (written to %s)", ports, path)


def _log_up(registry: ModelRegistry, addresses: str) -> None:
    """Log "serve is up" only when /ping would say Healthy; else a warning naming each unhealthy version and why."""
    healthy, details = registry.health()
    if healthy:
        logger.info("serve is up: %s", addresses)
        return
    down = [f"{name} version {version}: {entry.get('lastError') or 'no ready worker'}"
            for name, versions in details.items() for version, entry in versions.items()
            if entry["status"] != "Healthy"]  # fmt: skip
    logger.warning("serve is listening on %s but is not healthy (/ping answers 500 until every startup model has a "
                   "ready worker): %s", addresses, "; ".join(down))  # fmt: skip


async def _until_stopped(stop: asyncio.Event, tasks: list[asyncio.Task]) -> None:
    """Wait for a stop signal, or for a listener to end by itself (a port it could not bind)."""
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception():
            logger.error("a listener failed: %s", task.exception())


def run(settings: Settings) -> int:
    """Serve in the foreground (the CLI's `serve start --foreground`), on uvloop's event loop where installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(settings))
    return uvloop.run(serve(settings))
