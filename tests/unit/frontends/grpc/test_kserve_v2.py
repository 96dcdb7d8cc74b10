"""The v2 `inference.GRPCInferenceService` over a real grpc.aio server, with our own v2 stubs (tritonclient itself
runs against a real server in tests/integration/test_grpc.py: its `inference.*` messages cannot share a process
with ours)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from serve.batching import InferenceRequest, InferenceResponse
from serve.frontends.grpc.generated import grpc_predict_v2_pb2 as pb
from serve.frontends.grpc.generated import grpc_predict_v2_pb2_grpc as pb_grpc
from tests.unit.frontends.fakes import FakeRegistry
from tests.unit.frontends.grpc.harness import Env, run

pytestmark = pytest.mark.usefixtures("grpc_server")  # each test on serve's gRPC server and grpcio's


class V2Registry(FakeRegistry):
    """`mnist` has READY workers, batch size 8 and a model-config with typed tensors; `bert` has no worker."""

    def describe(self, name: str, version: str | None = None, all_versions: bool = False) -> list[dict]:
        entries = super().describe(name, version, all_versions)
        for entry in entries:
            if name == "mnist":
                entry.update(batchSize=8, maxBatchDelay=5, workers=[{"id": "1", "status": "READY"}])
        return entries

    def model_config(self, name: str, version: str | None) -> dict[str, Any]:
        if name != "mnist":
            return {}
        return {"handler": {"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
                            "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}]}}  # fmt: skip


async def doubler(request: InferenceRequest) -> InferenceResponse:
    """A v2 handler: every input doubled (BYTES repeated), named out_<name>; echoes the request parameters."""
    body = json.loads(request.inputs["body"])
    outputs = []
    for i in body["inputs"]:
        data = [d * 2 for d in i["data"]]
        outputs.append({"name": f"out_{i['name']}", "datatype": i["datatype"], "shape": i["shape"], "data": data})
    outputs.append({"name": "params", "datatype": "BYTES", "shape": [1],
                    "data": [json.dumps(body.get("parameters", {}), sort_keys=True)]})  # fmt: skip
    return InferenceResponse(body=json.dumps({"outputs": outputs}).encode())


def stub(env: Env) -> pb_grpc.GRPCInferenceServiceStub:
    return pb_grpc.GRPCInferenceServiceStub(env.inference)


def v2(test: Any, tmp_path: Path, **overrides: Any) -> None:
    registry = V2Registry()
    registry.responder = doubler
    run(test, tmp_path, registry, **overrides)


def test_health_and_server_metadata(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        assert (await stub(env).ServerLive(pb.ServerLiveRequest())).live
        assert (await stub(env).ServerReady(pb.ServerReadyRequest())).ready
        env.registry.healthy = False
        assert not (await stub(env).ServerReady(pb.ServerReadyRequest())).ready
        meta = await stub(env).ServerMetadata(pb.ServerMetadataRequest())
        assert meta.name == "serve"
        assert "binary_tensor_data" in meta.extensions

    v2(test, tmp_path)


def test_model_ready_and_metadata(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        assert (await stub(env).ModelReady(pb.ModelReadyRequest(name="mnist"))).ready
        assert not (await stub(env).ModelReady(pb.ModelReadyRequest(name="bert"))).ready
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub(env).ModelReady(pb.ModelReadyRequest(name="nope"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        meta = await stub(env).ModelMetadata(pb.ModelMetadataRequest(name="mnist", version="2.0"))
        assert (meta.name, list(meta.versions), meta.platform) == ("mnist", ["2.0"], "serve_python")
        assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [("x", "FP32", [-1, 4])]
        assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [("y", "FP32", [-1, 4])]

    v2(test, tmp_path)


def test_model_infer_with_raw_contents_of_every_numeric_kind(tmp_path: Path) -> None:
    arrays = {
        "f32": np.array([[1.5, -2.0], [3.0, 4.25]], dtype=np.float32),
        "i64": np.array([1, -2, 3], dtype=np.int64),
        "u8": np.array([1, 2, 100], dtype=np.uint8),
        "f64": np.array([0.5], dtype=np.float64),
    }
    datatypes = {"f32": "FP32", "i64": "INT64", "u8": "UINT8", "f64": "FP64"}

    async def test(env: Env) -> None:
        request = pb.ModelInferRequest(model_name="mnist", id="req-7")
        for name, array in arrays.items():
            request.inputs.add(name=name, datatype=datatypes[name], shape=list(array.shape))
            request.raw_input_contents.append(array.tobytes())
        request.parameters["priority"].uint64_param = 3
        request.parameters["temperature"].double_param = 0.5
        request.parameters["flag"].bool_param = True
        answer = await stub(env).ModelInfer(request)
        assert (answer.model_name, answer.model_version, answer.id) == ("mnist", "1.0", "req-7")
        assert len(answer.raw_output_contents) == len(answer.outputs) == 5
        assert not any(o.HasField("contents") for o in answer.outputs)  # tritonclient reads raw only
        for output, raw in zip(answer.outputs[:4], answer.raw_output_contents, strict=False):
            name = output.name.removeprefix("out_")
            got = np.frombuffer(raw, dtype=arrays[name].dtype).reshape(list(output.shape))
            np.testing.assert_array_equal(got, arrays[name] * 2)
            assert output.datatype == datatypes[name]
        params = answer.raw_output_contents[4][4:]  # BYTES: a 4-byte length, then the element
        assert json.loads(params) == {"flag": True, "priority": 3, "temperature": 0.5}

    v2(test, tmp_path)


def test_model_infer_with_typed_contents_and_bytes(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        request = pb.ModelInferRequest(model_name="mnist")
        x = request.inputs.add(name="x", datatype="INT32", shape=[3])
        x.contents.int_contents.extend([1, 2, 3])
        s = request.inputs.add(name="s", datatype="BYTES", shape=[2])
        s.contents.bytes_contents.extend([b"ab", b"c"])
        request.outputs.add(name="out_x")
        request.outputs.add(name="out_s")
        answer = await stub(env).ModelInfer(request)
        assert [o.name for o in answer.outputs] == ["out_x", "out_s"]
        np.testing.assert_array_equal(np.frombuffer(answer.raw_output_contents[0], dtype=np.int32), [2, 4, 6])
        assert answer.raw_output_contents[1] == b"\x04\x00\x00\x00abab\x02\x00\x00\x00cc"

    v2(test, tmp_path)


@pytest.mark.parametrize(
    ("build", "code", "fragment"),
    [
        (lambda r: r.inputs.add(name="x", datatype="FP32", shape=[2]) and r.raw_input_contents.append(b"\0" * 4),
         grpc.StatusCode.INVALID_ARGUMENT, "8 expected"),
        (lambda r: r.inputs.add(name="x", datatype="FP16", shape=[1]), grpc.StatusCode.INVALID_ARGUMENT,
         "raw_input_contents"),
        (lambda r: r.inputs.add(name="x", datatype="FP99", shape=[1]), grpc.StatusCode.INVALID_ARGUMENT,
         "unknown datatype"),
        (lambda r: r.raw_input_contents.append(b"x") or (r.inputs.add(name="a", datatype="UINT8", shape=[1])
         and r.inputs.add(name="b", datatype="UINT8", shape=[1])), grpc.StatusCode.INVALID_ARGUMENT, "one per input"),
        (lambda r: None, grpc.StatusCode.INVALID_ARGUMENT, "no inputs"),
        (lambda r: setattr(r, "model_name", "nope") or r.inputs.add(name="x", datatype="BOOL", shape=[0]),
         grpc.StatusCode.NOT_FOUND, "nope"),
    ],
)  # fmt: skip
def test_model_infer_errors(tmp_path: Path, build: Any, code: grpc.StatusCode, fragment: str) -> None:
    async def test(env: Env) -> None:
        request = pb.ModelInferRequest(model_name="mnist")
        build(request)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub(env).ModelInfer(request)
        assert err.value.code() == code
        assert fragment in (err.value.details() or "")

    v2(test, tmp_path)


def test_model_config_and_repository_index(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        config = (await stub(env).ModelConfig(pb.ModelConfigRequest(name="mnist"))).config
        assert (config.name, config.max_batch_size, config.platform) == ("mnist", 8, "serve_python")
        assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [("x", pb.TYPE_FP32, [4])]
        assert [(o.name, list(o.dims)) for o in config.output] == [("y", [4])]
        assert config.dynamic_batching.max_queue_delay_microseconds == 5000
        index = await stub(env).RepositoryIndex(pb.RepositoryIndexRequest())
        assert [(m.name, m.version, m.state) for m in index.models] == [
            ("bert", "1.0", "UNAVAILABLE"), ("mnist", "1.0", "READY"), ("mnist", "2.0", "READY")]  # fmt: skip
        ready = await stub(env).RepositoryIndex(pb.RepositoryIndexRequest(ready=True))
        assert {m.name for m in ready.models} == {"mnist"}

    v2(test, tmp_path)


def test_v2_needs_the_inference_key(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub(env).ModelReady(pb.ModelReadyRequest(name="mnist"))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        key = env.auth.key("inference")
        metadata = [("authorization", f"Bearer {key}")]
        assert (await stub(env).ModelReady(pb.ModelReadyRequest(name="mnist"), metadata=metadata)).ready
        assert (await stub(env).ServerLive(pb.ServerLiveRequest())).live  # open, like REST /v2/health/live

    v2(test, tmp_path, disable_token_authorization=False)
