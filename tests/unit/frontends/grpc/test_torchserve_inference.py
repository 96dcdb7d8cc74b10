"""TorchServe's InferenceAPIsService over a real grpc.aio server: Ping, Predictions, StreamPredictions, errors
(StreamPredictions2: test_stream_predictions2.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2

from serve.batching import InferenceRequest, InferenceResponse
from serve.errors import QueueFull
from serve.frontends.grpc.generated import inference_pb2 as pb
from serve.frontends.grpc.generated import inference_pb2_grpc as pb_grpc
from tests.unit.frontends.fakes import FakeRegistry
from tests.unit.frontends.grpc.harness import Env, run

pytestmark = pytest.mark.usefixtures("grpc_server")  # each test on serve's gRPC server and grpcio's


def stub(env: Env) -> pb_grpc.InferenceAPIsServiceStub:
    return pb_grpc.InferenceAPIsServiceStub(env.inference)


def test_ping_healthy_and_unhealthy(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        answer = await stub(env).Ping(empty_pb2.Empty())
        assert answer.health == '{\n  "status": "Healthy"\n}'
        env.registry.healthy = False
        assert json.loads((await stub(env).Ping(empty_pb2.Empty())).health) == {"status": "Unhealthy"}

    run(test, tmp_path)


def test_predictions_passes_each_input_as_bytes_and_returns_the_body(tmp_path: Path) -> None:
    seen: list[InferenceRequest] = []

    async def responder(request: InferenceRequest) -> InferenceResponse:
        seen.append(request)
        return InferenceResponse(body=b"answer:" + request.inputs["data"])

    registry = FakeRegistry()
    registry.responder = responder

    async def test(env: Env) -> None:
        request = pb.PredictionsRequest(model_name="mnist", model_version="2.0", input={"data": b"\x00\x01", "x": b"y"})
        answer = await stub(env).Predictions(request, metadata=[("x-trace", "abc")])
        assert answer.prediction == b"answer:\x00\x01"
        call = env.registry.calls[-1]
        assert call[:3] == ("submit", "mnist", "2.0")
        assert seen[0].inputs == {"data": b"\x00\x01", "x": b"y"}
        assert seen[0].content_types == {}
        assert seen[0].headers["x-trace"] == "abc"
        await stub(env).Predictions(pb.PredictionsRequest(model_name="bert", input={"data": b""}))
        assert env.registry.calls[-1][:3] == ("submit", "bert", None)  # empty version: the default

    run(test, tmp_path, registry)


@pytest.mark.parametrize(
    ("request_", "code", "fragment"),
    [
        (pb.PredictionsRequest(model_name="nope"), grpc.StatusCode.NOT_FOUND, "Model not found: nope"),
        (pb.PredictionsRequest(model_name="mnist", model_version="9"), grpc.StatusCode.NOT_FOUND, "9"),
        (pb.PredictionsRequest(), grpc.StatusCode.INVALID_ARGUMENT, "model_name is required"),
    ],
)
def test_predictions_errors(tmp_path: Path, request_: pb.PredictionsRequest, code: grpc.StatusCode,
                            fragment: str) -> None:  # fmt: skip
    async def test(env: Env) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub(env).Predictions(request_)
        assert err.value.code() == code
        assert fragment in (err.value.details() or "")

    run(test, tmp_path)


def test_a_full_queue_is_unavailable_and_a_handler_status_maps_to_its_code(tmp_path: Path) -> None:
    async def full(request: InferenceRequest) -> InferenceResponse:
        raise QueueFull("Model mnist has no room in its queue; retry later")

    async def bad_input(request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(status=400, body=b'{"message": "bad image"}')

    registry = FakeRegistry()

    async def test(env: Env) -> None:
        registry.responder = full
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub(env).Predictions(pb.PredictionsRequest(model_name="mnist"))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        registry.responder = bad_input
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub(env).Predictions(pb.PredictionsRequest(model_name="mnist"))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "bad image" in (err.value.details() or "")

    run(test, tmp_path, registry)


async def _chunks() -> AsyncIterator[bytes]:
    for part in (b"one", b"two", b"three"):
        yield part


def test_stream_predictions_sends_one_message_per_chunk(tmp_path: Path) -> None:
    async def streaming(request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(chunks=_chunks())

    registry = FakeRegistry()
    registry.responder = streaming

    async def test(env: Env) -> None:
        call = stub(env).StreamPredictions(pb.PredictionsRequest(model_name="mnist", input={"data": b"x"}))
        assert [m.prediction async for m in call] == [b"one", b"two", b"three"]
        # the unary rpc joins a streamed answer
        answer = await stub(env).Predictions(pb.PredictionsRequest(model_name="mnist"))
        assert answer.prediction == b"onetwothree"

    run(test, tmp_path, registry)


def test_stream_predictions_of_an_ordinary_answer_is_one_message(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        call = stub(env).StreamPredictions(pb.PredictionsRequest(model_name="mnist"))
        assert [m.prediction async for m in call] == [b'{"ok": true}']
        with pytest.raises(grpc.aio.AioRpcError) as err:
            _ = [m async for m in stub(env).StreamPredictions(pb.PredictionsRequest(model_name="nope"))]
        assert err.value.code() == grpc.StatusCode.NOT_FOUND

    run(test, tmp_path)


def test_a_stream_that_breaks_ends_with_the_error_status(tmp_path: Path) -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"first"
        raise QueueFull("the worker went away")

    async def streaming(request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(chunks=broken())

    registry = FakeRegistry()
    registry.responder = streaming

    async def test(env: Env) -> None:
        got: list[bytes] = []
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for message in stub(env).StreamPredictions(pb.PredictionsRequest(model_name="mnist")):
                got.append(message.prediction)
        assert got == [b"first"]
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE

    run(test, tmp_path, registry)
