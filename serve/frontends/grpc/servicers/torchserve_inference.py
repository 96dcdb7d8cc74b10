"""TorchServe's `InferenceAPIsService` (torchserve-compat.md section 4): Ping, Predictions, StreamPredictions and
StreamPredictions2.

Each `PredictionsRequest.input` entry becomes one handler input with no content type (the handler gets a
bytearray), as in TorchServe; the call's metadata reaches the handler as headers. `prediction` is the handler's
serialized answer. StreamPredictions sends one message per chunk of a streaming handler (one that yields, or a
continuous handler's emits), or one message for an ordinary answer.

StreamPredictions2 (bidirectional; TorchServe's InferenceImpl.streamPredictions2 and GRPCJob with STREAMPREDICT2)
answers each request of the call as StreamPredictions would, one request after the other, on the same dataplane
path: every message of one request's answer (all of a streaming handler's chunks) before the next request is read,
so the answers come in the requests' order. Where TorchServe's semantics are followed:
- an error answers that request in band, as TorchServe's sendError does for STREAMPREDICT2: one
  `PredictionResponse` with an empty `prediction` and `status` = google.rpc.Status {code, message, details:
  [ErrorInfo{reason}]}, and the call goes on with the next request. So does a stream that breaks after some
  chunks: its chunks so far, then the status message. The code comes from the same table as the other rpcs
  (an unknown model NOT_FOUND; TorchServe says INTERNAL), `reason` is TorchServe's exception type name that the
  REST error body carries (`ModelNotFoundException`, `InternalServerException`, ...).
- the client's half-close ends the call (OK) once the last request is answered; TorchServe completes the call at
  the half-close itself, dropping answers still on their way, which no client can want.
- a client's cancel (or the call's deadline) stops the request in flight: its answer's stream is closed, which
  reaches a continuous handler as its `cancel(request_id)` (serve/management/continuous.py), and requests not yet
  read are never run.
Sequences (a model with `sequenceBatching: true`, serve/management/sequences.py): a request's `sequence_id` is its
sequence (the `ts_request_sequence_id` header the router and the handler read), and its inputs
`ts_request_sequence_start` / `ts_request_sequence_end` ("true") start and end it, as TorchServe reads them (it
inverts the end flag, a bug: here "true" ends the sequence). A request without `sequence_id` to a stateful model
opens a new sequence, as over REST (TorchServe answers one without the start input with an in-band
"Parameter sequenceId is required."). Each answer message carries the request's sequence id, the new one for a
request that opened it (TorchServe leaves it unset), so a client can continue and match them. The same fields
work on Predictions and StreamPredictions, one request each.

Deliberate differences from TorchServe:
- errors map by serve.frontends.errors: an unknown model is NOT_FOUND and an empty model_name INVALID_ARGUMENT
  (TorchServe: INTERNAL for both).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import grpc
from google.protobuf import any_pb2, empty_pb2

from serve.batching import InferenceRequest, InferenceResponse
from serve.errors import InvalidInput, PredictionException
from serve.frontends.dataplane import DataPlane
from serve.frontends.errors import error_info
from serve.frontends.grpc.generated import inference_pb2 as pb
from serve.frontends.grpc.generated import inference_pb2_grpc as pb_grpc
from serve.frontends.grpc.status import abort, code_for_status
from serve.frontends.request_ids import new_request_id
from serve.management.sequences import SEQUENCE_END, SEQUENCE_ID, SEQUENCE_START

ERROR_INFO_TYPE_URL = "type.googleapis.com/google.rpc.ErrorInfo"


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

    async def StreamPredictions2(self, request_iterator: AsyncIterator[pb.PredictionsRequest],
                                 context: grpc.aio.ServicerContext) -> None:  # fmt: skip
        """A coroutine that writes through the context (not a generator): a cancel lands in the await in flight,
        so the answer's stream is closed at once, not when a suspended generator is collected."""
        async for request in request_iterator:
            await self._answer(request, context)

    async def _answer(self, request: pb.PredictionsRequest, context: grpc.aio.ServicerContext) -> None:
        """Write one StreamPredictions2 request's answer: its messages, or its error in band."""
        sequence_id = request.sequence_id if request.HasField("sequence_id") else None  # None: left unset
        try:
            response = await self._submit(request, context)
            sequence_id = response.headers.get(SEQUENCE_ID, sequence_id)  # the id of a sequence it opened
            if response.status >= 400:  # the handler answered an error status itself: the table maps its code
                raise PredictionException(response.body.decode("utf-8", "replace"), response.status)
        except Exception as exc:
            await context.write(_in_band_error(exc, sequence_id))
            return
        if response.chunks is None:
            await context.write(pb.PredictionResponse(prediction=response.body, sequence_id=sequence_id))
            return
        chunks = response.chunks
        try:
            while True:
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    return
                except Exception as exc:  # the stream broke: this request's error, the call goes on
                    await context.write(_in_band_error(exc, sequence_id))
                    return
                await context.write(pb.PredictionResponse(prediction=chunk, sequence_id=sequence_id))
        finally:  # ended early (cancelled, a write failed): closing the stream cancels the request in the worker
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _predict(self, request: pb.PredictionsRequest, context: grpc.aio.ServicerContext) -> InferenceResponse:
        try:
            response = await self._submit(request, context)
        except Exception as exc:
            await abort(context, exc)
        if response.status >= 400:  # the handler answered an error status itself (REST sends it with the body)
            await context.abort(code_for_status(response.status), response.body.decode("utf-8", "replace"))
        return response

    async def _submit(self, request: pb.PredictionsRequest, context: grpc.aio.ServicerContext) -> InferenceResponse:
        if not request.model_name:
            raise InvalidInput("Parameter model_name is required: set PredictionsRequest.model_name")
        headers = {k.lower(): v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
        headers.update(url_path="", explain="False")
        if request.sequence_id:  # a stateful model's sequence (its flags ride in the inputs, as in TorchServe)
            headers[SEQUENCE_ID] = request.sequence_id
        for flag in (SEQUENCE_START, SEQUENCE_END):
            if flag in request.input:
                headers[flag] = request.input[flag].decode("utf-8", "replace").strip().lower()
        job = InferenceRequest(request_id=new_request_id(), inputs=dict(request.input), headers=headers,
                               decode=self.decode)  # fmt: skip
        return await self.dataplane.predict(request.model_name, request.model_version or None, job)


def _in_band_error(exc: Exception, sequence_id: str | None) -> pb.PredictionResponse:
    """TorchServe's STREAMPREDICT2 error message: no prediction, `status` with the code, message and ErrorInfo."""
    info = error_info(exc)
    detail = any_pb2.Any(type_url=ERROR_INFO_TYPE_URL, value=_error_info_bytes(info.type))
    status = pb.Status(code=grpc.StatusCode[info.grpc_code].value[0], message=info.message, details=[detail])
    return pb.PredictionResponse(status=status, sequence_id=sequence_id)


def _error_info_bytes(reason: str) -> bytes:
    """google.rpc.ErrorInfo{reason} serialized (field 1, a string), without googleapis-common-protos."""
    data = reason.encode()
    length, prefix = len(data), bytearray()
    while length > 0x7F:  # the length as a protobuf varint
        prefix.append(length & 0x7F | 0x80)
        length >>= 7
    prefix.append(length)
    return b"\x0a" + bytes(prefix) + data
