"""A v2 inference whose answer may come in parts: what Triton's ModelStreamInfer carries (gRPC, bidirectional).

    async for answer in infer_stream(dataplane, model, version, request, headers):   # InferResponse each
        ...

The request takes core.infer's path (the same handler body, headers and sequence parameters). An ordinary answer
is one InferResponse. A handler that streams (it yields, or calls send_intermediate_predict_response: Triton's
"decoupled" models) answers one InferResponse per chunk, each chunk a v2 answer of its own
(`{"outputs": [...]}`), as Triton's decoupled models send any number of responses to one request; a handler that
yields nothing answers none. The REST route and ModelInfer, which have one answer per request, keep core.infer's
joining of the chunks.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator

from serve.batching import InferenceRequest
from serve.errors import InvalidInput, PredictionException
from serve.frontends.dataplane import DataPlane
from serve.frontends.oip import core
from serve.frontends.oip.sequence import sequence_headers
from serve.frontends.request_ids import new_request_id


async def infer_stream(dataplane: DataPlane, model: str, version: str | None, request: core.InferRequest,
                       headers: dict[str, str] | None = None) -> AsyncIterator[core.InferResponse]:  # fmt: skip
    """Each answer of one v2 request (see the module docstring); the serving errors as core.infer raises them."""
    if not request.inputs:
        raise InvalidInput("the inference request has no inputs: send at least one {name, datatype, shape, data}")
    headers = {**(headers or {}), **sequence_headers(request.parameters)}
    job = InferenceRequest(
        request_id=request.id or new_request_id(),
        inputs={"body": json.dumps(core.handler_body(request)).encode()},
        content_types={"body": "application/json"},
        headers={**headers, "content-type": "application/json", core.PROTOCOL_HEADER: "v2"},
        decode=True,
    )
    answer = await dataplane.predict(model, version, job)
    if version is None:
        version = str(dataplane.registry.describe(model, None)[0]["modelVersion"])
    if answer.chunks is None:
        yield _response(model, version, request, answer.body, answer.status, answer.content_type)
        return
    async for chunk in answer.chunks:
        yield _response(model, version, request, chunk, answer.status, answer.content_type)


def _response(model: str, version: str, request: core.InferRequest, body: bytes, status: int,
              content_type: str) -> core.InferResponse:  # fmt: skip
    if status != 200:
        raise PredictionException(core.error_message(body), status)
    outputs = core.parse_handler_answer(body, content_type, core.plain_output_name(request))
    if request.outputs:
        by_name = {o.name: o for o in outputs}
        missing = [r.name for r in request.outputs if r.name not in by_name]
        if missing:
            raise InvalidInput(f"requested output(s) {missing} are not among the model's outputs {list(by_name)}")
        outputs = [dataclasses.replace(by_name[r.name]) for r in request.outputs]
    return core.InferResponse(model_name=model, model_version=version, id=request.id, outputs=outputs)
