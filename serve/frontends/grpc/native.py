"""`Server`: serve's own gRPC server on asyncio, in the same event loop as the REST listeners and the dataplane.

It has grpc.aio.Server's shape where server.py uses it (`add_generic_rpc_handlers` and
`add_registered_method_handlers`, which the generated `add_*Servicer_to_server` call; `add_insecure_port`,
`add_secure_port`, `start`, `stop(grace)`), so the servicers, grpc's health and reflection servicers and the token
interceptor are the same objects on either server.

Why our own: a grpc.aio call costs ~0.2 ms of CPU in grpcio's core threads, its poller thread and two asyncio tasks
before a servicer runs (bench/grpc_echo.py), twice what the REST path spends on a whole request, which made gRPC
half as fast as REST on the same model (bench/grpc_rest.py). Here a call is one asyncio task on the loop that
already serves the dataplane: HTTP/2 framing and HPACK in Python (serve/frontends/grpc/http2/), the answers of one
loop turn written together. `grpc_server=grpcio` in config.properties selects grpc.aio instead.

At most `max_idle_connections` (config.properties, as for REST) connections without a call in flight are kept;
a new connection past that evicts one (GOAWAY, then close once the peer has read it): one never answered first,
then the one idle longest, as for `max_connections`. It stops counting as idle at once, so a burst of new
connections closes as many old ones, not the same closing one again. Every connection also
counts against the process's `max_connections` with the REST listeners' (serve/frontends/connections.py). Once a
second the server gives each connection its `tick` (header and request-idle timeouts, http2/connection.py). All
connections share one receive budget (`Limits.server_buffer_budget`).

TLS: `add_secure_port` takes an `ssl.SSLContext` (server.py builds it from certificate_file and private_key_file)
and offers ALPN "h2", which gRPC clients require.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, NamedTuple

import grpc

from serve.frontends.connections import OpenConnections, eviction_order
from serve.frontends.grpc.call import Call
from serve.frontends.grpc.http2.connection import Connection
from serve.frontends.grpc.http2.lifecycle import Limits
from serve.frontends.grpc.http2.receive import Budget
from serve.frontends.grpc.http2.stream import Stream

DEFAULT_MESSAGE_LIMIT = 4 * 1024 * 1024  # grpc's default receive limit
TICK_SECONDS = 1.0  # how often each connection's time bounds are checked


class HandlerCallDetails(NamedTuple):
    """What grpc.aio hands a server interceptor: the method path and the call's metadata."""

    method: str
    invocation_metadata: tuple[tuple[str, str | bytes], ...]


class Server:
    def __init__(self, interceptors: Sequence[grpc.aio.ServerInterceptor] | None = None,
                 max_receive_message_length: int = DEFAULT_MESSAGE_LIMIT,
                 max_send_message_length: int = DEFAULT_MESSAGE_LIMIT,
                 limits: Limits | None = None, connections: OpenConnections | None = None,
                 connection_class: type[Connection] = Connection) -> None:  # fmt: skip
        self.interceptors = list(interceptors or ())
        self.max_receive_message_length = max_receive_message_length
        self.max_send_message_length = max_send_message_length
        self.limits = limits or Limits()
        # the process's, shared with REST in server.py (an OpenConnections with none open is falsy: no `or`)
        self.open_connections = OpenConnections() if connections is None else connections
        self._budget = Budget()
        self._connection_class = connection_class  # another HTTP/2 layer with Connection's interface (benchmarks)
        self._ticker: asyncio.Task[None] | None = None
        self._registered: dict[str, grpc.RpcMethodHandler] = {}
        self._generic: list[grpc.GenericRpcHandler] = []
        self._sockets: list[tuple[socket.socket, ssl.SSLContext | None]] = []
        self._servers: list[asyncio.Server] = []
        self._connections: set[Connection] = set()
        self._stopped = asyncio.Event()

    # ---- what the generated code and server.py call --------------------------------------------------------------

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        self._generic.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        for method, handler in handlers.items():
            self._registered[f"/{service}/{method}"] = handler

    def add_insecure_port(self, address: str) -> int:
        return self._listen(address, None)

    def add_secure_port(self, address: str, context: ssl.SSLContext) -> int:
        context.set_alpn_protocols(["h2"])
        return self._listen(address, context)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for sock, tls in self._sockets:
            self._servers.append(await loop.create_server(self._connection, sock=sock, ssl=tls, backlog=1024))
        self._ticker = loop.create_task(self._tick())

    async def stop(self, grace: float | None) -> None:
        """Stop listening, let the calls in flight finish for up to `grace` seconds, then reset what is left."""
        for server in self._servers:
            server.close()
        if self._ticker is not None:
            self._ticker.cancel()
        connections = list(self._connections)
        for connection in connections:
            connection.goaway()
        connections = [c for c in connections if c.streams]  # calls in flight: the idle ones linger, not awaited
        if connections and grace:
            await asyncio.wait([asyncio.ensure_future(c.closed.wait()) for c in connections], timeout=grace)
        for connection in list(self._connections):
            connection.abort()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1)
        self._stopped.set()

    async def wait_for_termination(self, timeout: float | None = None) -> bool:
        try:
            await asyncio.wait_for(self._stopped.wait(), timeout)
        except TimeoutError:
            return False
        return True

    # ---- calls ---------------------------------------------------------------------------------------------------

    async def method_handler(self, path: str, metadata: tuple[tuple[str, str | bytes], ...]) -> Any:
        """The handler of `path` after the interceptors, or None for a method no service has."""
        details = HandlerCallDetails(path, metadata)
        if not self.interceptors:
            return self._lookup(details)
        continuation: Callable[[Any], Awaitable[Any]] = self._lookup_async
        for interceptor in reversed(self.interceptors):
            continuation = _chained(interceptor, continuation)
        return await continuation(details)

    def _lookup(self, details: HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._registered.get(details.method)
        if handler is not None:
            return handler
        for generic in self._generic:
            handler = generic.service(details)  # type: ignore[arg-type]
            if handler is not None:
                return handler
        return None

    async def _lookup_async(self, details: HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        return self._lookup(details)

    def _connection(self) -> Connection:
        connection = self._connection_class(self._call, self.limits, self._budget, self.open_connections)
        if len(self._connections) >= self.limits.max_idle_connections:  # else fewer are idle than the limit
            idle = [c for c in self._connections if c.idle_since is not None]
            if len(idle) >= self.limits.max_idle_connections:
                victim = min(idle, key=lambda c: eviction_order(c, c.idle_since or 0.0))
                self._connections.discard(victim)  # closing: no longer one of the idle ones
                victim.evict("max_idle_connections")
        self._connections.add(connection)
        asyncio.get_running_loop().create_task(self._forget_when_closed(connection))
        return connection

    async def _forget_when_closed(self, connection: Connection) -> None:
        await connection.closed.wait()
        self._connections.discard(connection)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            now = time.monotonic()
            for connection in list(self._connections):
                connection.tick(now)

    def _call(self, connection: Connection, stream: Stream) -> Call:
        return Call(self, connection, stream)

    def _listen(self, address: str, tls: ssl.SSLContext | None) -> int:
        host, _, port = address.rpartition(":")
        host = host.strip("[]") or None  # type: ignore[assignment]
        try:
            family, kind, proto, _, sockaddr = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM,
                                                                  flags=socket.AI_PASSIVE)[0]  # fmt: skip
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(sockaddr)
                sock.listen(1024)
                sock.setblocking(False)
            except OSError:
                sock.close()
                raise
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"cannot bind {address}: {exc}") from exc
        self._sockets.append((sock, tls))
        return int(sock.getsockname()[1])


def _chained(interceptor: grpc.aio.ServerInterceptor,
             continuation: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:  # fmt: skip
    async def call(details: Any) -> Any:
        return await interceptor.intercept_service(continuation, details)

    return call
