"""TorchServe's ManagementAPIsService over a real grpc.aio server: every rpc through the DataPlane, and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from serve.frontends.grpc.generated import management_pb2 as pb
from serve.frontends.grpc.generated import management_pb2_grpc as pb_grpc
from tests.unit.frontends.grpc.harness import Env, run

pytestmark = pytest.mark.usefixtures("grpc_server")  # each test on serve's gRPC server and grpcio's


def stub(env: Env) -> pb_grpc.ManagementAPIsServiceStub:
    return pb_grpc.ManagementAPIsServiceStub(env.management)


def test_register_passes_set_fields_and_leaves_zero_fields_to_defaults(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        env.registry.message = 'Model "m" Version: 1.0 registered with 2 initial workers'
        request = pb.RegisterModelRequest(url="m.mar", model_name="m", initial_workers=2, batch_size=4,
                                          synchronous=True, runtime="python")  # fmt: skip
        answer = await stub(env).RegisterModel(request)
        assert answer.msg == env.registry.message
        _, url, options = env.registry.calls[-1]
        assert url == "m.mar"
        assert options == {"model_name": "m", "handler": None, "runtime": "python", "batch_size": 4,
                           "max_batch_delay": None, "initial_workers": 2, "synchronous": True,
                           "response_timeout": None, "startup_timeout": None}  # fmt: skip

    run(test, tmp_path, enable_model_api=True)


@pytest.mark.parametrize(
    ("request_", "overrides", "code"),
    [
        (pb.RegisterModelRequest(url="m.mar"), {}, grpc.StatusCode.PERMISSION_DENIED),  # model API off
        (pb.RegisterModelRequest(), {"enable_model_api": True}, grpc.StatusCode.INVALID_ARGUMENT),  # no url
        (pb.RegisterModelRequest(url="m.mar", runtime="java"), {"enable_model_api": True},
         grpc.StatusCode.INVALID_ARGUMENT),
    ],
)  # fmt: skip
def test_register_errors(tmp_path: Path, request_: pb.RegisterModelRequest, overrides: dict,
                         code: grpc.StatusCode) -> None:  # fmt: skip
    async def test(env: Env) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub(env).RegisterModel(request_)
        assert err.value.code() == code
        assert err.value.details()

    run(test, tmp_path, **overrides)


def test_describe_one_version_all_versions_and_customized(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        answer = await stub(env).DescribeModel(pb.DescribeModelRequest(model_name="mnist"))
        assert json.loads(answer.msg) == [{"modelName": "mnist", "modelVersion": "1.0", "workers": []}]
        assert answer.msg.startswith("[\n  {")  # TorchServe's pretty JSON
        answer = await stub(env).DescribeModel(pb.DescribeModelRequest(model_name="mnist", model_version="all"))
        assert [m["modelVersion"] for m in json.loads(answer.msg)] == ["1.0", "2.0"]
        answer = await stub(env).DescribeModel(pb.DescribeModelRequest(model_name="mnist", customized=True))
        assert json.loads(answer.msg)[0]["customizedMetadata"] == {"hello": "world"}
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub(env).DescribeModel(pb.DescribeModelRequest(model_name="nope"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND

    run(test, tmp_path)


def test_list_models_refuses_out_of_range_and_treats_limit_zero_as_the_default(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        answer = await stub(env).ListModels(pb.ListModelsRequest())
        assert [m["modelName"] for m in json.loads(answer.msg)["models"]] == ["bert", "mnist"]
        assert env.registry.calls[-1] == ("list_models", 100, 0)
        await stub(env).ListModels(pb.ListModelsRequest(limit=5, next_page_token=1))
        assert env.registry.calls[-1] == ("list_models", 5, 1)
        for request in (pb.ListModelsRequest(limit=-3), pb.ListModelsRequest(limit=101),
                        pb.ListModelsRequest(next_page_token=-1)):  # fmt: skip
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub(env).ListModels(request)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, request
            assert "Invalid" in (err.value.details() or "")
        assert env.registry.calls[-1] == ("list_models", 5, 1)

    run(test, tmp_path)


def test_scale_worker(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        request = pb.ScaleWorkerRequest(model_name="mnist", model_version="2.0", min_worker=2, max_worker=3,
                                        synchronous=True, number_gpu=1, timeout=5)  # fmt: skip
        assert (await stub(env).ScaleWorker(request)).msg == "ok"
        assert env.registry.calls[-1] == ("scale", "mnist", "2.0", 2, 3, True, None)
        await stub(env).ScaleWorker(pb.ScaleWorkerRequest(model_name="mnist"))
        assert env.registry.calls[-1] == ("scale", "mnist", None, 1, 1, False, None)  # TorchServe's defaults
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub(env).ScaleWorker(pb.ScaleWorkerRequest(model_name="mnist", min_worker=3, max_worker=2))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "max_worker cannot be less than min_worker" in (err.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub(env).ScaleWorker(pb.ScaleWorkerRequest(model_name="nope"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND

    run(test, tmp_path)


def test_set_default(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        answer = await stub(env).SetDefault(pb.SetDefaultRequest(model_name="mnist", model_version="2.0"))
        assert answer.msg == 'Default version successfully updated for model "mnist" to "2.0"'
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub(env).SetDefault(pb.SetDefaultRequest(model_name="mnist", model_version="7.0"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND

    run(test, tmp_path)


def test_unregister(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        answer = await stub(env).UnregisterModel(pb.UnregisterModelRequest(model_name="bert"))
        assert answer.msg == 'Model "bert" unregistered'
        assert env.registry.calls[-1] == ("unregister", "bert", None)
        await stub(env).UnregisterModel(pb.UnregisterModelRequest(model_name="mnist", model_version="2.0"))
        assert env.registry.calls[-1] == ("unregister", "mnist", "2.0")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub(env).UnregisterModel(pb.UnregisterModelRequest(model_name="nope"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND

    run(test, tmp_path, enable_model_api=True)


def test_unregister_with_the_model_api_off(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub(env).UnregisterModel(pb.UnregisterModelRequest(model_name="bert"))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "enable-model-api" in (err.value.details() or "")

    run(test, tmp_path)


def test_describe_with_nan_and_infinity_answers_standard_json(tmp_path: Path) -> None:
    """A handler's describe metadata holding NaN or Infinity: null, as REST answers (issue 17 item 7)."""

    async def custom(name: str, version: str | None) -> list[dict]:
        return [{"modelName": name, "customizedMetadata": {"score": float("nan"), "bounds": [float("-inf"), 1.5]}}]

    async def test(env: Env) -> None:
        env.registry.describe_custom = custom  # type: ignore[method-assign]
        answer = await stub(env).DescribeModel(pb.DescribeModelRequest(model_name="mnist", customized=True))

        def refuse(word: str) -> None:
            raise ValueError(f"not standard JSON: {word}")

        metadata = json.loads(answer.msg, parse_constant=refuse)[0]["customizedMetadata"]
        assert metadata == {"score": None, "bounds": [None, 1.5]}

    run(test, tmp_path)
