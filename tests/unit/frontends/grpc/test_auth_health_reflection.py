"""Token auth through `authorization` metadata, grpc.health.v1 Check, and server reflection's service list."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from serve.frontends.grpc.generated import grpc_predict_v2_pb2 as kpb
from serve.frontends.grpc.generated import grpc_predict_v2_pb2_grpc as kpb_grpc
from serve.frontends.grpc.generated import inference_pb2 as ipb
from serve.frontends.grpc.generated import inference_pb2_grpc as ipb_grpc
from serve.frontends.grpc.generated import management_pb2 as mpb
from serve.frontends.grpc.generated import management_pb2_grpc as mpb_grpc
from serve.frontends.http.auth import INFERENCE, MANAGEMENT
from tests.unit.frontends.grpc.harness import Env, run

pytestmark = pytest.mark.usefixtures("grpc_server")  # each test on serve's gRPC server and grpcio's

AUTH_ON = {"disable_token_authorization": False}


def bearer(key: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {key}")]


def test_inference_needs_the_inference_key(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        stub = ipb_grpc.InferenceAPIsServiceStub(env.inference)
        request = ipb.PredictionsRequest(model_name="mnist")
        for metadata in ([], bearer("wrong"), bearer(env.auth.key(MANAGEMENT)), [("authorization", "token")]):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Predictions(request, metadata=metadata)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "Token Authorization failed" in (err.value.details() or "")
        assert env.registry.calls == []
        with pytest.raises(grpc.aio.AioRpcError) as err:  # a streaming rpc is refused the same way
            _ = [m async for m in stub.StreamPredictions(ipb.PredictionsRequest(model_name="mnist"))]
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        for scheme in ("Bearer", "bearer", "BEARER"):  # the scheme is case-insensitive (RFC 7235)
            metadata = [("authorization", f"{scheme} {env.auth.key(INFERENCE)}")]
            ok = await stub.Predictions(ipb.PredictionsRequest(model_name="mnist"), metadata=metadata)
            assert ok.prediction == b'{"ok": true}'
            assert env.registry.calls[-1][0] == "submit"

    run(test, tmp_path, **AUTH_ON)


def test_health_rpcs_are_open_like_their_rest_twins(tmp_path: Path) -> None:
    """Ping (REST /ping), ServerLive, ServerReady, ServerMetadata (REST /v2/health/*, /v2) need no key; the
    model-level v2 rpcs still do."""

    async def test(env: Env) -> None:
        stub = ipb_grpc.InferenceAPIsServiceStub(env.inference)
        assert '"Healthy"' in (await stub.Ping(empty_pb2.Empty())).health
        v2 = kpb_grpc.GRPCInferenceServiceStub(env.inference)
        assert (await v2.ServerLive(kpb.ServerLiveRequest())).live
        assert (await v2.ServerReady(kpb.ServerReadyRequest())).ready
        assert (await v2.ServerMetadata(kpb.ServerMetadataRequest())).name == "serve"
        for call, request in ((v2.ModelReady, kpb.ModelReadyRequest(name="mnist")),
                              (v2.ModelMetadata, kpb.ModelMetadataRequest(name="mnist")),
                              (v2.RepositoryIndex, kpb.RepositoryIndexRequest())):  # fmt: skip
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call(request)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED

    run(test, tmp_path, **AUTH_ON)


def test_management_needs_the_management_key(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        stub = mpb_grpc.ManagementAPIsServiceStub(env.management)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ListModels(mpb.ListModelsRequest(), metadata=bearer(env.auth.key(INFERENCE)))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert env.registry.calls == []
        await stub.ListModels(mpb.ListModelsRequest(), metadata=bearer(env.auth.key(MANAGEMENT)))

    run(test, tmp_path, **AUTH_ON)


def test_health_check_is_open_and_follows_ping(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        inference = health_pb2_grpc.HealthStub(env.inference)
        serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
        assert (await inference.Check(health_pb2.HealthCheckRequest())).status == serving
        service = "org.pytorch.serve.grpc.inference.InferenceAPIsService"
        assert (await inference.Check(health_pb2.HealthCheckRequest(service=service))).status == serving
        env.registry.healthy = False
        assert (await inference.Check(health_pb2.HealthCheckRequest())).status == not_serving
        management = health_pb2_grpc.HealthStub(env.management)
        assert (await management.Check(health_pb2.HealthCheckRequest())).status == serving
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await inference.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND

    run(test, tmp_path, **AUTH_ON)


async def list_services(channel: grpc.aio.Channel) -> set[str]:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    responses = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    async for response in responses:
        return {s.name for s in response.list_services_response.service}
    raise AssertionError("no reflection response")


def test_reflection_lists_the_services_without_a_key(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        assert await list_services(env.inference) == {
            "org.pytorch.serve.grpc.inference.InferenceAPIsService",
            "inference.GRPCInferenceService",
            "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection",
        }
        assert await list_services(env.management) == {
            "org.pytorch.serve.grpc.management.ManagementAPIsService",
            "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection",
        }

    run(test, tmp_path, **AUTH_ON)


def test_message_size_limits_come_from_the_settings(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        stub = ipb_grpc.InferenceAPIsServiceStub(env.inference)
        big = ipb.PredictionsRequest(model_name="mnist", input={"data": b"x" * 5_000})
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Predictions(big)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        await stub.Predictions(ipb.PredictionsRequest(model_name="mnist", input={"data": b"x" * 100}))

    run(test, tmp_path, max_request_size=4_000)
