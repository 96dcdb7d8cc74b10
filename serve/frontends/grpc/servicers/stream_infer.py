"""Triton's ModelStreamInfer on `inference.GRPCInferenceService`, mixed into KServeV2Servicer (kserve_v2.py):
a bidirectional stream of ModelInferRequest in, ModelStreamInferResponse out.

Each request of the stream is answered in turn, in the order it came, through serve.frontends.oip.streaming: an
ordinary answer is one `infer_response`; a handler that streams (Triton's decoupled models, such as the
repeat_int32 stand-in) sends one `infer_response` per chunk; an error answers that request with `error_message`
alone and the stream goes on, as in Triton (tritonclient hands it to the callback as an InferenceServerException).
The client's half-close ends the call once the last request is answered; a cancel stops the request in flight.
Sequences ride on the requests' `sequence_id` / `sequence_start` / `sequence_end` parameters
(serve/frontends/oip/sequence.py), so Triton's sequence stream clients keep their sequences on one worker each.
Answering in turn, not concurrently, keeps each sequence's order without more bookkeeping; Triton may interleave
the answers of different sequences, which its clients match by request id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from grpc.aio import ServicerContext as Context

from serve.frontends import oip
from serve.frontends.dataplane import DataPlane
from serve.frontends.errors import error_info
from serve.frontends.grpc.generated import grpc_predict_v2_pb2 as pb
from serve.frontends.grpc.servicers.parameters import parameters_of
from serve.frontends.oip.streaming import infer_stream


class StreamInfer:
    dataplane: DataPlane

    async def ModelStreamInfer(self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Context) -> None:
        """A coroutine that writes through the context (not a generator): a cancel lands in the await in flight."""
        from serve.frontends.grpc.servicers import kserve_v2  # the message conversions (that module imports this)

        headers = {k.lower(): v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
        async for request in request_iterator:
            try:
                infer_request = oip.InferRequest(
                    inputs=kserve_v2.input_arrays(request), id=request.id,
                    parameters=parameters_of(request.parameters),
                    outputs=[oip.RequestedOutput(o.name, parameters_of(o.parameters))
                             for o in request.outputs],
                )  # fmt: skip
                answers = infer_stream(self.dataplane, request.model_name, request.model_version or None,
                                       infer_request, dict(headers))  # fmt: skip
                async for answer in answers:
                    response = kserve_v2.infer_response(answer)
                    await context.write(pb.ModelStreamInferResponse(infer_response=response))
            except Exception as exc:  # this request's error; the stream goes on
                await context.write(pb.ModelStreamInferResponse(error_message=error_info(exc).message))
