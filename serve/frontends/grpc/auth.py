"""The token interceptor: every rpc but health and reflection needs `authorization: Bearer <key>` metadata.

The inference key guards the inference server (7070), the management key the management server (7071), checked by
the REST listeners' `TokenAuth`. Health checking and reflection stay open, as REST `/ping` does (probes and
grpcurl need no key), and so do the health twins of the open REST routes: TorchServe's `Ping` (`/ping`) and
the v2 `ServerLive`, `ServerReady` and `ServerMetadata` (`/v2/health/*`, `/v2`'s server identity).

Deliberate difference: a missing or wrong key is UNAUTHENTICATED (the gRPC status for "no valid credentials",
and the table's code for 401), not TorchServe's PERMISSION_DENIED, which gRPC reserves for an authenticated
caller lacking the permission.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from serve.errors import Unauthorized
from serve.frontends.grpc.status import grpc_code
from serve.frontends.http.auth import MANAGEMENT, TokenAuth

OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.v1alpha.ServerReflection/",
                 "/grpc.reflection.v1.ServerReflection/")  # fmt: skip
OPEN_METHODS = frozenset({
    "/org.pytorch.serve.grpc.inference.InferenceAPIsService/Ping",
    "/inference.GRPCInferenceService/ServerLive",
    "/inference.GRPCInferenceService/ServerReady",
    "/inference.GRPCInferenceService/ServerMetadata",
})  # fmt: skip


# on the inference server, but they change what is served: the management key, as REST's load/unload take
MANAGEMENT_METHODS = frozenset({
    "/inference.GRPCInferenceService/RepositoryModelLoad",
    "/inference.GRPCInferenceService/RepositoryModelUnload",
})  # fmt: skip


class TokenInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, auth: TokenAuth, kind: str) -> None:
        self.auth = auth
        self.kind = kind  # INFERENCE or MANAGEMENT

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not self.auth.enabled or method in OPEN_METHODS or method.startswith(OPEN_PREFIXES):
            return handler
        metadata = dict(handler_call_details.invocation_metadata or ())
        try:
            self.auth.check(MANAGEMENT if method in MANAGEMENT_METHODS else self.kind, metadata.get("authorization"))
        except Unauthorized as exc:
            return _denied(handler, grpc_code(exc), str(exc))
        return handler


def _denied(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same kind as `handler` that ends the call with (code, message)."""

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)

    async def streaming(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)
        yield  # an async generator, as grpc expects for a streaming response

    codecs = {"request_deserializer": handler.request_deserializer, "response_serializer": handler.response_serializer}
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary, **codecs)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(streaming, **codecs)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary, **codecs)
    return grpc.stream_stream_rpc_method_handler(streaming, **codecs)
