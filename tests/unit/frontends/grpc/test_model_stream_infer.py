"""ModelStreamInfer (Triton's bidirectional rpc, grpc/servicers/stream_infer.py) on both gRPC servers: one
infer_response per answer or per chunk of a streaming handler, requests answered in order, an error in band as
error_message with the stream going on, and the sequence parameters reaching the handler as TorchServe's headers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from serve.batching import InferenceRequest, InferenceResponse
from serve.frontends.grpc.generated import grpc_predict_v2_pb2 as pb
from serve.frontends.grpc.generated import grpc_predict_v2_pb2_grpc as pb_grpc
from tests.unit.frontends.fakes import FakeRegistry
from tests.unit.frontends.grpc.harness import Env, run

pytestmark = pytest.mark.usefixtures("grpc_server")  # each test on serve's gRPC server and grpcio's


def answer(value: int) -> bytes:
    return json.dumps({"outputs": [{"name": "OUT", "datatype": "INT32", "shape": [1], "data": [value]}]}).encode()


def ask(value: int, request_id: str, model: str = "mnist", **parameters: object) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, id=request_id)
    request.inputs.add(name="IN", datatype="INT32", shape=[1])
    request.raw_input_contents.append(np.array([value], dtype=np.int32).tobytes())
    for key, value_ in parameters.items():
        if isinstance(value_, bool):
            request.parameters[key].bool_param = value_
        elif isinstance(value_, int):
            request.parameters[key].int64_param = value_
        else:
            request.parameters[key].string_param = str(value_)
    return request


async def requests(*items: pb.ModelInferRequest) -> AsyncIterator[pb.ModelInferRequest]:
    for item in items:
        yield item


def test_answers_chunks_errors_and_sequence_headers(tmp_path: Path) -> None:
    seen: list[dict[str, str]] = []

    async def chunks(n: int) -> AsyncIterator[bytes]:
        for i in range(n):
            yield answer(100 + i)

    async def responder(request: InferenceRequest) -> InferenceResponse:
        seen.append({k: v for k, v in request.headers.items() if k.startswith("ts_request_sequence")})
        value = json.loads(request.inputs["body"])["inputs"][0]["data"][0]
        return InferenceResponse(chunks=chunks(value)) if value >= 2 else InferenceResponse(body=answer(value))

    registry = FakeRegistry()
    registry.responder = responder

    async def test(env: Env) -> None:
        call = pb_grpc.GRPCInferenceServiceStub(env.inference).ModelStreamInfer(requests(
            ask(1, "a", sequence_id=1000, sequence_start=True), ask(3, "b"), ask(1, "c", model="nope"),
            ask(0, "d", sequence_id="s-1", sequence_end=True), ask(1, "e", sequence_start="yes")))  # fmt: skip
        got = [m async for m in call]
        ids_values = [(m.infer_response.id, np.frombuffer(m.infer_response.raw_output_contents[0], np.int32)[0])
                      for m in got if not m.error_message]  # fmt: skip
        assert ids_values == [("a", 1), ("b", 100), ("b", 101), ("b", 102), ("d", 0)]
        errors = [m.error_message for m in got if m.error_message]
        assert len(errors) == 2 and "nope" in errors[0] and "sequence_start must be a boolean" in errors[1]
        assert [m.error_message != "" for m in got] == [False, False, False, False, True, False, True]
        assert seen[0] == {"ts_request_sequence_id": "1000", "ts_request_sequence_start": "true"}
        assert seen[1] == {} and seen[2]["ts_request_sequence_id"] == "s-1"
        assert seen[2]["ts_request_sequence_end"] == "true"

    run(test, tmp_path, registry)
