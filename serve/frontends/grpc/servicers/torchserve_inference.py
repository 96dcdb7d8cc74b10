"""TorchServe's `InferenceAPIsService` (torchserve-compat.md section 4): Ping, Predictions, StreamPredictions.

Each `PredictionsRequest.input` entry becomes one handler input with no content type (the handler gets a
bytearray), as in TorchServe; the call's metadata reaches the handler as headers. `prediction` is the handler's
serialized answer. StreamPredictions sends one message per chunk of a streaming handler (one that yields), or one
message for an ordinary answer.

Deliberate differences from TorchServe:
- errors map by serve.frontends.errors: an unknown model is NOT_FOUND and an empty model_name INVALID_ARGUMENT
  (TorchServe: INTERNAL for both).
- StreamPredictions2 (bidirectional, stateful sequences) is declared but not served: UNIMPLEMENTED.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import grpc
from google.protobuf import empty_pb2

from serve.batching import InferenceRequest, InferenceResponse
from serve.errors import InvalidInput
from serve.frontends.dataplane import DataPlane
from serve.frontends.grpc.generated import inference_pb2 as pb
from serve.frontends.grpc.generated import inference_pb2_grpc as pb_grpc
from serve.frontends.grpc.status import abort, code_for_status
from serve.frontends.request_ids import new_request_id


class TorchServeInferenceServicer(pb_grpc.InferenceAPIsServiceServicer):
    def __init__(self, dataplane: DataPlane, decode: bool = True) -> None:
        self.dataplane = dataplane
        self.decode = decode  # TorchServe's decode_input_request (inputs carry no content type: stays bytes)

    async def Ping(self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext) -> pb.TorchServeHealthResponse:
        healthy = self.dataplane.ping()
        return pb.TorchServeHealthResponse(health=json.dumps({"status": "Healthy" if healthy else "Unhealthy"},
                                                             indent=2))  # fmt: skip

    async def Predictions(self, request: pb.PredictionsRequest,
                          context: grpc.aio.ServicerContext) -> pb.PredictionResponse:  # fmt: skip
        response = await self._predict(request, context)
        if response.chunks is None:
            return pb.PredictionResponse(prediction=response.body)
        try:  # a streaming handler called through the unary rpc: the whole answer in one message
            return pb.PredictionResponse(prediction=b"".join([chunk async for chunk in response.chunks]))
        except Exception as exc:
            await abort(context, exc)

    async def StreamPredictions(self, request: pb.PredictionsRequest,
                                context: grpc.aio.ServicerContext) -> AsyncIterator[pb.PredictionResponse]:  # fmt: skip
        response = await self._predict(request, context)
        if response.chunks is None:
            yield pb.PredictionResponse(prediction=response.body)
            return
        try:
            async for chunk in response.chunks:
                yield pb.PredictionResponse(prediction=chunk)
        except Exception as exc:  # the stream broke after some messages: end it with the error's status
            await abort(context, exc)

    async def _predict(self, request: pb.PredictionsRequest, context: grpc.aio.ServicerContext) -> InferenceResponse:
        try:
            if not request.model_name:
                raise InvalidInput("Parameter model_name is required: set PredictionsRequest.model_name")
            headers = {k.lower(): v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
            headers.update(url_path="", explain="False")
            job = InferenceRequest(request_id=new_request_id(), inputs=dict(request.input), headers=headers,
                                   decode=self.decode)  # fmt: skip
            response = await self.dataplane.predict(request.model_name, request.model_version or None, job)
        except Exception as exc:
            await abort(context, exc)
        if response.status >= 400:  # the handler answered an error status itself (REST sends it with the body)
            await context.abort(code_for_status(response.status), response.body.decode("utf-8", "replace"))
        return response
