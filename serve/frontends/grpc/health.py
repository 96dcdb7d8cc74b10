"""Standard gRPC health checking (`grpc.health.v1.Health/Check`), so Kubernetes gRPC probes work.

The status is computed on every Check, not pushed: on the inference server, SERVING when `DataPlane.ping()` is
healthy (every model has a live worker, as REST `/ping`), NOT_SERVING otherwise; on the management server always
SERVING (the management API works without models). `service` "" is the whole server; a service it serves answers
the same; any other name is NOT_FOUND, as the health protocol says. Watch is not served (UNIMPLEMENTED).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVICE_NAME = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


class HealthServicer(health_pb2_grpc.HealthServicer):
    def __init__(self, healthy: Callable[[], bool], services: Iterable[str]) -> None:
        self.healthy = healthy
        self.services = {"", SERVICE_NAME, *services}

    async def Check(self, request: health_pb2.HealthCheckRequest,
                    context: grpc.aio.ServicerContext) -> health_pb2.HealthCheckResponse:  # fmt: skip
        if request.service not in self.services:
            known = sorted(self.services)
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"Unknown service {request.service!r}: ask for one of {known}"
            )
        status = (
            health_pb2.HealthCheckResponse.SERVING if self.healthy() else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        return health_pb2.HealthCheckResponse(status=status)
