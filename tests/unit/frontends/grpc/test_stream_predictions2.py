"""StreamPredictions2 (TorchServe's bidirectional rpc) on both gRPC servers: answers in order, errors in band as
TorchServe's GRPCJob sends them for STREAMPREDICT2, the half-close, a cancel, and token auth."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from serve.batching import InferenceRequest, InferenceResponse
from serve.errors import QueueFull
from serve.frontends.grpc.generated import inference_pb2 as pb
from serve.frontends.grpc.generated import inference_pb2_grpc as pb_grpc
from serve.frontends.http.auth import INFERENCE
from tests.unit.frontends.fakes import FakeRegistry
from tests.unit.frontends.grpc.harness import Env, run

pytestmark = pytest.mark.usefixtures("grpc_server")  # each test on serve's gRPC server and grpcio's


def stub(env: Env) -> pb_grpc.InferenceAPIsServiceStub:
    return pb_grpc.InferenceAPIsServiceStub(env.inference)


async def requests(*items: pb.PredictionsRequest) -> AsyncIterator[pb.PredictionsRequest]:
    for item in items:
        yield item


def ask(data: bytes, sequence_id: str | None = None, model: str = "mnist") -> pb.PredictionsRequest:
    return pb.PredictionsRequest(model_name=model, input={"data": data}, sequence_id=sequence_id)


def error_info_class() -> Any:
    """google.rpc.ErrorInfo (error_details.proto: reason = 1, domain = 2, metadata = 3), built here as the reference
    the in-band status's detail is read with (googleapis-common-protos is not installed)."""
    file = descriptor_pb2.FileDescriptorProto(name="google/rpc/error_details_test.proto", package="google.rpc",
                                              syntax="proto3")  # fmt: skip
    message = file.message_type.add(name="ErrorInfo")
    for number, name in ((1, "reason"), (2, "domain")):
        message.field.add(name=name, number=number, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                          label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)  # fmt: skip
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("google.rpc.ErrorInfo"))


def in_band(message: pb.PredictionResponse) -> tuple[grpc.StatusCode, str, str]:
    """(code, message, ErrorInfo.reason) of an in-band error answer."""
    assert message.HasField("status") and message.prediction == b""
    (detail,) = message.status.details
    assert detail.type_url == "type.googleapis.com/google.rpc.ErrorInfo"
    info = error_info_class().FromString(detail.value)
    code = next(c for c in grpc.StatusCode if c.value[0] == message.status.code)
    return code, message.status.message, info.reason


def test_requests_are_answered_in_order_each_streamed_answer_whole_before_the_next(tmp_path: Path) -> None:
    events: list[str] = []

    async def chunks(tag: str) -> AsyncIterator[bytes]:
        for i in range(3):
            await asyncio.sleep(0)  # a chance for the next request to overtake, were they run side by side
            events.append(f"{tag}{i}")
            yield f"{tag}{i}".encode()

    async def responder(request: InferenceRequest) -> InferenceResponse:
        tag = request.inputs["data"].decode()
        events.append(f"submit {tag}")
        return InferenceResponse(chunks=chunks(tag)) if tag.startswith("s") else InferenceResponse(body=tag.encode())

    registry = FakeRegistry()
    registry.responder = responder

    async def test(env: Env) -> None:
        call = stub(env).StreamPredictions2(requests(ask(b"sa", "seq-1"), ask(b"plain", "seq-1"), ask(b"sb")))
        got = [(m.prediction, m.sequence_id if m.HasField("sequence_id") else None) async for m in call]
        assert got == [(b"sa0", "seq-1"), (b"sa1", "seq-1"), (b"sa2", "seq-1"), (b"plain", "seq-1"),
                       (b"sb0", None), (b"sb1", None), (b"sb2", None)]  # fmt: skip
        assert events == ["submit sa", "sa0", "sa1", "sa2", "submit plain", "submit sb", "sb0", "sb1", "sb2"]
        assert await call.code() == grpc.StatusCode.OK  # the half-close ended it, after the last answer

    run(test, tmp_path, registry)


def test_each_error_is_answered_in_band_and_the_call_goes_on(tmp_path: Path) -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"first"
        raise QueueFull("the worker went away")

    async def responder(request: InferenceRequest) -> InferenceResponse:
        data = request.inputs.get("data", b"")
        if data == b"handler-400":
            return InferenceResponse(status=400, body=b'{"message": "bad image"}')
        return InferenceResponse(chunks=broken()) if data == b"breaks" else InferenceResponse(body=b"ok:" + data)

    registry = FakeRegistry()
    registry.responder = responder

    async def test(env: Env) -> None:
        sent = [ask(b"x", "s1", model="nope"), pb.PredictionsRequest(), ask(b"handler-400", "s1"), ask(b"breaks"),
                ask(b"last", "s1")]  # fmt: skip
        got = [m async for m in stub(env).StreamPredictions2(requests(*sent))]
        assert len(got) == 6
        assert in_band(got[0]) == (grpc.StatusCode.NOT_FOUND, "Model not found: nope", "ModelNotFoundException")
        assert got[0].sequence_id == "s1"
        code, message, reason = in_band(got[1])
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "BadRequestException")
        assert "model_name is required" in message and not got[1].HasField("sequence_id")
        code, message, reason = in_band(got[2])
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "InternalServerException")
        assert "bad image" in message
        assert got[3].prediction == b"first" and not got[3].HasField("status")
        assert in_band(got[4]) == (grpc.StatusCode.UNAVAILABLE, "the worker went away", "ServiceUnavailableException")
        assert got[5].prediction == b"ok:last" and got[5].sequence_id == "s1" and not got[5].HasField("status")

    run(test, tmp_path, registry)


def test_a_cancel_mid_stream_closes_the_answer_and_no_later_request_runs(tmp_path: Path) -> None:
    closed = asyncio.Event()

    async def endless() -> AsyncIterator[bytes]:
        try:
            for i in range(100_000):
                await asyncio.sleep(0.001)
                yield b"%d" % i
        finally:  # what the continuous dispatch turns into the handler's cancel(request_id)
            closed.set()

    async def responder(request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(chunks=endless()) if request.inputs["data"] == b"endless" else InferenceResponse()

    registry = FakeRegistry()
    registry.responder = responder

    async def test(env: Env) -> None:
        more = asyncio.Event()

        async def client_requests() -> AsyncIterator[pb.PredictionsRequest]:
            yield ask(b"endless")
            await more.wait()
            yield ask(b"after")

        call = stub(env).StreamPredictions2(client_requests())
        assert (await call.read()).prediction == b"0"
        assert (await call.read()).prediction == b"1"
        call.cancel()
        more.set()
        await closed.wait()  # bounded by the harness (10 s)
        assert [c[3].inputs["data"] for c in registry.calls if c[0] == "submit"] == [b"endless"]
        assert await call.code() == grpc.StatusCode.CANCELLED
        # the call is gone: a new one on the same channel is answered
        registry.responder = lambda request: _answer(b"again")
        assert [m.prediction async for m in stub(env).StreamPredictions2(requests(ask(b"x")))] == [b"again"]

    run(test, tmp_path, registry)


async def _answer(body: bytes) -> InferenceResponse:
    return InferenceResponse(body=body)


def test_without_the_inference_key_it_is_unauthenticated(tmp_path: Path) -> None:
    async def test(env: Env) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            _ = [m async for m in stub(env).StreamPredictions2(requests(ask(b"x")))]
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert env.registry.calls == []
        metadata = [("authorization", f"Bearer {env.auth.key(INFERENCE)}")]
        call = stub(env).StreamPredictions2(requests(ask(b"x"), ask(b"y")), metadata=metadata)
        assert [m.prediction async for m in call] == [b'{"ok": true}'] * 2

    run(test, tmp_path, disable_token_authorization=False)
