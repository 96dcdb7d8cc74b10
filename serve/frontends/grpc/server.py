"""`create_grpc_servers(dataplane, settings, auth)`: the two gRPC servers, built but not started.

`grpc_server` picks the implementation: "serve" (the default), our asyncio HTTP/2 server on the dataplane's event
loop (native.py: why it exists is there), or "grpcio", grpc.aio. Both take the same servicers, health, reflection
and interceptor, and the same limits and TLS files; the gRPC tests run against both.

- inference, on grpc_inference_address:grpc_inference_port (7070): TorchServe's InferenceAPIsService, the KServe
  v2 `inference.GRPCInferenceService`, health (SERVING when DataPlane.ping() is healthy) and reflection; token:
  the inference key.
- management, on grpc_management_address:grpc_management_port (7071): TorchServe's ManagementAPIsService, health
  and reflection; token: the management key.

Token auth is a server interceptor, installed only when token auth is on (fixed at start): without keys no Python
runs per rpc before the servicer. Message size limits come from max_request_size (receive) and max_response_size
(send), not grpcio's 4 MiB default. With enable_grpc_ssl both listen with TLS from certificate_file and
private_key_file.
The caller starts them (`await server.start()`) and stops them with `await stop_grpc_server(server, grace)`: health
turns NOT_SERVING and ends its Watch calls (which never end on their own, so the stop would wait out its grace
period for them), then the calls in flight get `grace` seconds.
"""

from __future__ import annotations

import ssl
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc
from grpc_reflection.v1alpha._async import ReflectionServicer

from serve.errors import ConfigError
from serve.frontends.connections import OpenConnections
from serve.frontends.dataplane import DataPlane
from serve.frontends.grpc.auth import TokenInterceptor
from serve.frontends.grpc.generated import (
    grpc_predict_v2_pb2,
    grpc_predict_v2_pb2_grpc,
    inference_pb2,
    inference_pb2_grpc,
    management_pb2,
    management_pb2_grpc,
)
from serve.frontends.grpc.health import SERVICE_NAME as HEALTH_SERVICE
from serve.frontends.grpc.health import HealthServicer, health_pb2_grpc
from serve.frontends.grpc.http2.lifecycle import Limits
from serve.frontends.grpc.native import Server
from serve.frontends.grpc.servicers.kserve_v2 import KServeV2Servicer
from serve.frontends.grpc.servicers.torchserve_inference import TorchServeInferenceServicer
from serve.frontends.grpc.servicers.torchserve_management import TorchServeManagementServicer
from serve.frontends.http.auth import INFERENCE, MANAGEMENT, TokenAuth

if TYPE_CHECKING:
    from serve.config import Settings

INFERENCE_SERVICE = inference_pb2.DESCRIPTOR.services_by_name["InferenceAPIsService"].full_name
V2_SERVICE = grpc_predict_v2_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
MANAGEMENT_SERVICE = management_pb2.DESCRIPTOR.services_by_name["ManagementAPIsService"].full_name
GrpcServer: TypeAlias = grpc.aio.Server | Server
_BOUND: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_HEALTH: weakref.WeakKeyDictionary[Any, HealthServicer] = weakref.WeakKeyDictionary()


def bound_port(server: GrpcServer) -> int:
    """The port a server from create_grpc_servers listens on (the one the system chose for a configured port 0)."""
    return _BOUND[server]


async def stop_grpc_server(server: GrpcServer, grace: float) -> None:
    """Stop a server from create_grpc_servers: its health watchers get NOT_SERVING and their calls end, then the
    calls in flight get `grace` seconds."""
    health = _HEALTH.get(server)
    if health is not None:
        health.enter_graceful_shutdown()
    await server.stop(grace)


def create_grpc_servers(dataplane: DataPlane, settings: Settings, auth: TokenAuth,
                        connections: OpenConnections | None = None) -> list[GrpcServer]:  # fmt: skip
    """`connections`: the process's open connections (with the REST listeners'), for serve's own server."""
    if connections is None:  # (an OpenConnections with none open is falsy)
        connections = OpenConnections(settings.max_connections or None)
    inference = _server(settings, auth, INFERENCE, connections)
    inference_pb2_grpc.add_InferenceAPIsServiceServicer_to_server(
        TorchServeInferenceServicer(dataplane, settings.decode_input_request), inference
    )
    grpc_predict_v2_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(KServeV2Servicer(dataplane), inference)
    _add_health_and_reflection(inference, dataplane.ping, [INFERENCE_SERVICE, V2_SERVICE])
    _bind(inference, settings.grpc_inference_address, settings.grpc_inference_port, settings, "grpc_inference")

    management = _server(settings, auth, MANAGEMENT, connections)
    management_pb2_grpc.add_ManagementAPIsServiceServicer_to_server(TorchServeManagementServicer(dataplane), management)
    _add_health_and_reflection(management, lambda: True, [MANAGEMENT_SERVICE])
    _bind(management, settings.grpc_management_address, settings.grpc_management_port, settings, "grpc_management")
    return [inference, management]


def _server(settings: Settings, auth: TokenAuth, kind: str, connections: OpenConnections) -> GrpcServer:
    # an interceptor costs every rpc a coroutine: none when token auth is off (nothing to check)
    interceptors = [TokenInterceptor(auth, kind)] if auth.enabled else None
    if settings.grpc_server == "serve":
        limits = Limits(max_idle_connections=settings.max_idle_connections,
                        header_timeout=settings.header_read_timeout)  # fmt: skip
        return Server(interceptors, max_receive_message_length=settings.max_request_size,
                      max_send_message_length=settings.max_response_size, limits=limits,
                      connections=connections)  # fmt: skip
    options = [("grpc.max_receive_message_length", settings.max_request_size),
               ("grpc.max_send_message_length", settings.max_response_size),
               ("grpc.so_reuseport", 0)]  # a port already taken fails loudly, as the REST listeners do  # fmt: skip
    return grpc.aio.server(interceptors=interceptors, options=options)


def _add_health_and_reflection(server: GrpcServer, healthy: Callable[[], bool], services: list[str]) -> None:
    health = _HEALTH[server] = HealthServicer(healthy, services)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    names = [*services, HEALTH_SERVICE, reflection.SERVICE_NAME]
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(ReflectionServicer(names), server)


def _bind(server: GrpcServer, address: str, port: int, settings: Settings, key: str) -> None:
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    target = f"{host}:{port}"
    try:
        if settings.enable_grpc_ssl:
            bound = server.add_secure_port(target, _credentials(settings, isinstance(server, Server)))
        else:
            bound = server.add_insecure_port(target)
    except RuntimeError as exc:  # grpcio raises when the port cannot be bound
        bound, reason = 0, str(exc)
    else:
        reason = "the port is in use or the address is not local"
    if bound == 0:
        raise ConfigError(f"cannot listen for gRPC on {target}: {reason}. Set {key}_address / {key}_port "
                          "in config.properties to a free local address and port")  # fmt: skip
    _BOUND[server] = bound


def _credentials(settings: Settings, native: bool) -> Any:
    if not settings.certificate_file or not settings.private_key_file:
        raise ConfigError("enable_grpc_ssl=true needs certificate_file and private_key_file in config.properties")
    if native:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(settings.certificate_file, settings.private_key_file)
        return context
    key = Path(settings.private_key_file).read_bytes()
    cert = Path(settings.certificate_file).read_bytes()
    return grpc.ssl_server_credentials([(key, cert)])
