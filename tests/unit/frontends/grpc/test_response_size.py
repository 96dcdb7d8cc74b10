"""On gRPC an answer over max_response_size is RESOURCE_EXHAUSTED on both servers, never INTERNAL: a worker's 507
(an answer over the limit, memory that ran out) and a v2 message whose serialized size is over it (the tensor's raw
bytes count, not the worker's JSON text of them)."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from serve.batching import InferenceRequest, InferenceResponse
from serve.frontends.grpc.generated import grpc_predict_v2_pb2 as v2
from serve.frontends.grpc.generated import grpc_predict_v2_pb2_grpc as v2_grpc
from serve.frontends.grpc.generated import inference_pb2 as ts
from serve.frontends.grpc.generated import inference_pb2_grpc as ts_grpc
from tests.unit.frontends.fakes import FakeRegistry
from tests.unit.frontends.grpc.harness import Env, run
from tests.unit.frontends.test_response_size import v2_answer

pytestmark = pytest.mark.usefixtures("grpc_server")  # each test on serve's gRPC server and grpcio's


def _infer_request(n: int) -> v2.ModelInferRequest:
    request = v2.ModelInferRequest(model_name="mnist")
    request.inputs.add(name="n", datatype="INT64", shape=[1]).contents.int64_contents.append(n)
    return request


def test_a_workers_507_is_resource_exhausted_over_grpc(tmp_path: Path) -> None:
    message = "the response of 7000000 bytes exceeds max_response_size (6553500 bytes); raise max_response_size"

    async def refused(request: InferenceRequest) -> InferenceResponse:
        body = {"code": 507, "type": "InternalServerException", "message": message}
        return InferenceResponse(status=507, body=json.dumps(body).encode())

    registry = FakeRegistry()
    registry.responder = refused

    async def test(env: Env) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await ts_grpc.InferenceAPIsServiceStub(env.inference).Predictions(ts.PredictionsRequest(model_name="mnist"))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert message in (err.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await v2_grpc.GRPCInferenceServiceStub(env.inference).ModelInfer(_infer_request(1))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

    run(test, tmp_path, registry)


def test_a_v2_grpc_answer_counts_its_serialized_message(tmp_path: Path) -> None:
    """3000 INT32 values: 12 kB raw in the message (the worker's JSON of them was 6 kB), against a 10 kB limit."""
    registry = FakeRegistry()
    registry.responder = v2_answer

    async def test(env: Env) -> None:
        stub = v2_grpc.GRPCInferenceServiceStub(env.inference)
        assert len((await stub.ModelInfer(_infer_request(2000))).raw_output_contents[0]) == 8000
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ModelInfer(_infer_request(3000))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

    run(test, tmp_path, registry, max_response_size=10_000)
