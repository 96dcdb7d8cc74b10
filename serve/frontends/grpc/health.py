"""Standard gRPC health checking (`grpc.health.v1.Health`): Check for Kubernetes gRPC probes, Watch for gRPC's
client-side health checking.

The status is computed from the server, not set by it: on the inference server SERVING when `DataPlane.ping()` is
healthy (every model has a live worker, as REST `/ping`), NOT_SERVING otherwise; on the management server always
SERVING (the management API works without models). `service` "" is the whole server; a service it serves answers
the same. Check of any other name is NOT_FOUND, as health.proto says.

Watch (health.proto's contract): the current status at once, then each change, until the client cancels. A
service this server does not serve gets one SERVICE_UNKNOWN message, not an error, and the call stays open (our
services never change, so nothing follows it). Decisions, and why:
- Changes are found by one sampler per servicer, which evaluates the status every WATCH_INTERVAL seconds while at
  least one client watches and wakes the watchers when it changed. The registry has no change events to listen to
  (a worker's state changes in its pool, its process and its supervision), and the health it computes for /ping
  costs microseconds: a watcher costs nothing while the status stands, a thousand watchers cost one evaluation
  per interval, and no sampler runs when no one watches. The price: a change is seen up to WATCH_INTERVAL late,
  and an unhealthy spell shorter than that may not be seen at all (Check, computed per call, has it).
- `enter_graceful_shutdown()` (grpcio's HealthServicer has the same) answers NOT_SERVING to every watcher and
  ends their calls, and Check answers NOT_SERVING from then on: a stopping server tells its clients to go
  elsewhere and does not wait out its grace period for calls that never end on their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVICE_NAME = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
WATCH_INTERVAL = 0.5  # seconds between two evaluations of the status while a client watches
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class HealthServicer(health_pb2_grpc.HealthServicer):
    def __init__(self, healthy: Callable[[], bool], services: Iterable[str]) -> None:
        self.healthy = healthy
        self.services = {"", SERVICE_NAME, *services}
        self._stopping = False
        self._watchers = 0
        self._changed: asyncio.Event | None = None  # set (then replaced) when the status changed
        self._sampler: asyncio.Task[None] | None = None

    def status(self) -> health_pb2.HealthCheckResponse.ServingStatus.ValueType:
        return NOT_SERVING if self._stopping or not self.healthy() else SERVING

    async def Check(self, request: health_pb2.HealthCheckRequest,
                    context: grpc.aio.ServicerContext) -> health_pb2.HealthCheckResponse:  # fmt: skip
        if request.service not in self.services:
            known = sorted(self.services)
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"Unknown service {request.service!r}: ask for one of {known}"
            )
        return health_pb2.HealthCheckResponse(status=self.status())

    async def Watch(self, request: health_pb2.HealthCheckRequest,
                    context: grpc.aio.ServicerContext) -> AsyncIterator[health_pb2.HealthCheckResponse]:  # fmt: skip
        if request.service not in self.services:
            yield health_pb2.HealthCheckResponse(status=SERVICE_UNKNOWN)
            while not self._stopping:
                await self._change().wait()
            return
        self._watchers += 1
        if self._sampler is None or self._sampler.done():
            self._sampler = asyncio.get_running_loop().create_task(self._sample())
        try:
            sent = None
            while True:
                changed = self._change()  # taken before the status is read: a change after the read wakes us
                status = self.status()
                if status != sent:
                    yield health_pb2.HealthCheckResponse(status=status)
                    sent = status
                if self._stopping:
                    return
                await changed.wait()
        finally:
            self._watchers -= 1

    def enter_graceful_shutdown(self) -> None:
        """NOT_SERVING from now on; every Watch sends it and ends."""
        self._stopping = True
        self._wake()

    async def _sample(self) -> None:
        """Evaluate the status every WATCH_INTERVAL s while someone watches; wake the watchers when it changed."""
        last = self.status()
        while self._watchers and not self._stopping:
            await asyncio.sleep(WATCH_INTERVAL)
            status = self.status()
            if status != last:
                last = status
                self._wake()

    def _change(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _wake(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()
