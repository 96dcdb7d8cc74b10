"""Triton's ModelStatistics, RepositoryModelLoad and RepositoryModelUnload rpcs (servicers/triton_extensions.py) and
ModelReady of an unloaded model, on serve's gRPC server and grpcio's, with a fake registry."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from serve.frontends.grpc.generated import grpc_predict_v2_pb2 as kpb
from serve.frontends.grpc.generated import grpc_predict_v2_pb2_grpc as kpb_grpc
from serve.frontends.http.auth import INFERENCE, MANAGEMENT
from tests.unit.frontends.grpc.harness import Env, run

pytestmark = pytest.mark.usefixtures("grpc_server")


def bearer(key: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {key}")]


def test_model_statistics(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        v2 = kpb_grpc.GRPCInferenceServiceStub(env.inference)
        every = await v2.ModelStatistics(kpb.ModelStatisticsRequest())
        assert sorted((m.name, m.version) for m in every.model_stats) == [("bert", "1.0"), ("mnist", "1.0"),
                                                                          ("mnist", "2.0")]  # fmt: skip
        one = await v2.ModelStatistics(kpb.ModelStatisticsRequest(name="mnist", version="2.0"))
        assert [(m.name, m.version, m.inference_count) for m in one.model_stats] == [("mnist", "2.0", 0)]
        assert one.model_stats[0].inference_stats.success.count == 0
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await v2.ModelStatistics(kpb.ModelStatisticsRequest(name="nope"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND

    run(test, tmp_path)


def test_load_and_unload_take_the_management_key(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        v2 = kpb_grpc.GRPCInferenceServiceStub(env.inference)
        unload = kpb.RepositoryModelUnloadRequest(model_name="bert")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await v2.RepositoryModelUnload(unload, metadata=bearer(env.auth.key(INFERENCE)))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        await v2.RepositoryModelUnload(unload, metadata=bearer(env.auth.key(MANAGEMENT)))
        assert [c for c in env.registry.calls if c[0] == "unregister"] == [("unregister", "bert", "1.0")]
        load = kpb.RepositoryModelLoadRequest(model_name="mnist")
        load.parameters["file:1/model.onnx"].bytes_param = b"x"
        with pytest.raises(grpc.aio.AioRpcError) as err:  # Triton's code for model files sent with a load
            await v2.RepositoryModelLoad(load, metadata=bearer(env.auth.key(MANAGEMENT)))
        assert err.value.code() == grpc.StatusCode.INTERNAL
        assert "failed to poll from model repository" in (err.value.details() or "")

    run(test, tmp_path, disable_token_authorization=False, enable_model_api=True)


def test_model_control_needs_the_model_api_and_an_unloaded_model_is_not_ready(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "resnet.mar").write_bytes(b"")

    async def test(env: Env) -> None:
        v2 = kpb_grpc.GRPCInferenceServiceStub(env.inference)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await v2.RepositoryModelUnload(kpb.RepositoryModelUnloadRequest(model_name="bert"))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert not (await v2.ModelReady(kpb.ModelReadyRequest(name="resnet"))).ready  # in the store, unloaded
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await v2.ModelReady(kpb.ModelReadyRequest(name="nope"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND

    run(test, tmp_path, model_store=store)
