"""KServe v2 / Open Inference Protocol `inference.GRPCInferenceService`, through the protocol-free
serve.frontends.oip core (the same calls as the REST `/v2` routes), with tritonclient's wire conventions
(open-inference-protocol.md sections 2-3):

- inputs come from `raw_input_contents` (one entry per input, in order: what tritonclient sends) or, for other
  clients, from the typed `contents` lists (FP16 and BF16 only raw);
- outputs always go out as `raw_output_contents`, in output order (tritonclient reads only those);
- request parameters of every kind (bool, int64, string, double, uint64) reach the handler as JSON values.

ModelConfig and RepositoryIndex are serve.frontends.oip.repository's dicts (the REST `/config` and
`/v2/repository/index` answers), enough for tritonclient's `get_model_config` / `get_model_repository_index` and
perf_analyzer.

ModelStatistics, RepositoryModelLoad and RepositoryModelUnload come from triton_extensions.py.

Deliberate differences from Triton: ModelReady and ModelMetadata of an unknown model are NOT_FOUND (the REST
routes' 404, through serve.frontends.errors), except ModelReady of a model in the model store that is not
registered (unloaded): ready false, as Triton answers it; the shared-memory, trace and log rpcs are not declared
(UNIMPLEMENTED). ModelStreamInfer comes from stream_infer.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from google.protobuf import json_format
from grpc.aio import ServicerContext as Context

from serve.errors import InvalidInput, ModelNotFound
from serve.frontends import oip
from serve.frontends.dataplane import DataPlane
from serve.frontends.grpc.generated import grpc_predict_v2_pb2 as pb
from serve.frontends.grpc.generated import grpc_predict_v2_pb2_grpc as pb_grpc
from serve.frontends.grpc.servicers.parameters import parameters_of
from serve.frontends.grpc.servicers.stream_infer import StreamInfer
from serve.frontends.grpc.servicers.triton_extensions import TritonExtensions
from serve.frontends.grpc.status import abort
from serve.frontends.oip import model_control, repository, tensors

# the typed `contents` list that holds each datatype (spec section 2.2); FP16 and BF16 have none
CONTENTS_FIELD = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
}  # fmt: skip


def set_parameters(target: Any, params: dict[str, Any]) -> None:
    for key, value in params.items():
        slot = target[key]
        if isinstance(value, bool):
            slot.bool_param = value
        elif isinstance(value, int):
            if value >= 2**63:  # only uint64 holds it
                slot.uint64_param = value
            else:
                slot.int64_param = value
        elif isinstance(value, float):
            slot.double_param = value
        else:
            slot.string_param = str(value)


def input_arrays(request: pb.ModelInferRequest) -> list[oip.InferInput]:
    """The request's inputs as arrays: raw contents when present (then for every input), else typed contents."""
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise InvalidInput(f"raw_input_contents has {len(raw)} entries for {len(request.inputs)} inputs: send one "
                           "per input, in input order")  # fmt: skip
    inputs = []
    for i, spec in enumerate(request.inputs):
        datatype = tensors.normalize(spec.datatype)
        shape = list(spec.shape)
        if raw:
            if spec.HasField("contents"):
                raise InvalidInput(f"input {spec.name!r} sets contents while raw_input_contents is used: use one")
            data = tensors.from_bytes(raw[i], datatype, shape, spec.name)
        else:
            data = _typed(spec, datatype, shape)
        inputs.append(oip.InferInput(spec.name, datatype, shape, data, parameters_of(spec.parameters)))
    return inputs


def _typed(spec: Any, datatype: str, shape: list[int]) -> np.ndarray:
    field = CONTENTS_FIELD.get(datatype)
    if field is None:
        raise InvalidInput(f"input {spec.name!r}: {datatype} has no typed contents; send it in raw_input_contents")
    values = list(getattr(spec.contents, field))
    if datatype == "BYTES":
        return tensors.from_json([bytes(v) for v in values], datatype, shape, spec.name)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if len(values) != count:
        raise InvalidInput(f"input {spec.name!r}: {len(values)} values in contents.{field} for shape {shape} "
                           f"({count} expected)")  # fmt: skip
    return np.array(values, dtype=tensors.numpy_dtype(datatype)).reshape(shape)


def infer_response(answer: oip.InferResponse) -> pb.ModelInferResponse:
    response = pb.ModelInferResponse(model_name=answer.model_name, model_version=answer.model_version or "",
                                     id=answer.id)  # fmt: skip
    set_parameters(response.parameters, answer.parameters)
    for output in answer.outputs:
        tensor = response.outputs.add(name=output.name, datatype=output.datatype, shape=list(output.shape))
        set_parameters(tensor.parameters, {k: v for k, v in output.parameters.items()
                                           if k not in oip.core.BINARY_PARAMETERS})  # fmt: skip
        response.raw_output_contents.append(tensors.to_bytes(output.data, output.datatype))
    return response


def _version(version: str) -> str | None:
    return version or None


class KServeV2Servicer(TritonExtensions, StreamInfer, pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, dataplane: DataPlane) -> None:
        self.dataplane = dataplane

    async def ServerLive(self, request: pb.ServerLiveRequest, context: Context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=oip.server_live(self.dataplane))

    async def ServerReady(self, request: pb.ServerReadyRequest, context: Context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=oip.server_ready(self.dataplane))

    async def ModelReady(self, request: pb.ModelReadyRequest, context: Context) -> pb.ModelReadyResponse:
        try:
            ready = oip.model_ready(self.dataplane, request.name, _version(request.version))
        except ModelNotFound as exc:  # unloaded but in the model store: not ready, as Triton answers it
            if request.name not in model_control.store_models(self.dataplane):
                await abort(context, exc)
            ready = False
        except Exception as exc:
            await abort(context, exc)
        return pb.ModelReadyResponse(ready=ready)

    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: Context) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(**oip.server_metadata())

    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Context) -> pb.ModelMetadataResponse:
        try:
            meta = oip.model_metadata(self.dataplane, request.name, _version(request.version))
        except Exception as exc:
            await abort(context, exc)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=meta["name"], versions=meta["versions"], platform=meta["platform"],
            inputs=[tensor(name=t["name"], datatype=t["datatype"], shape=t["shape"]) for t in meta["inputs"]],
            outputs=[tensor(name=t["name"], datatype=t["datatype"], shape=t["shape"]) for t in meta["outputs"]],
        )  # fmt: skip

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Context) -> pb.ModelInferResponse:
        try:
            infer_request = oip.InferRequest(
                inputs=input_arrays(request), id=request.id, parameters=parameters_of(request.parameters),
                outputs=[oip.RequestedOutput(o.name, parameters_of(o.parameters)) for o in request.outputs],
            )  # fmt: skip
            headers = {k.lower(): v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
            answer = await oip.infer(self.dataplane, request.model_name, _version(request.model_version),
                                     infer_request, headers)  # fmt: skip
            return infer_response(answer)
        except Exception as exc:
            await abort(context, exc)

    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Context) -> pb.ModelConfigResponse:
        try:
            config = repository.model_config(self.dataplane, request.name, _version(request.version))
        except Exception as exc:
            await abort(context, exc)
        return pb.ModelConfigResponse(config=json_format.ParseDict(config, pb.ModelConfig()))

    async def RepositoryIndex(self, request: pb.RepositoryIndexRequest,
                              context: Context) -> pb.RepositoryIndexResponse:  # fmt: skip
        try:
            index = repository.repository_index(self.dataplane, request.ready)
        except Exception as exc:
            await abort(context, exc)
        return pb.RepositoryIndexResponse(models=[pb.RepositoryIndexResponse.ModelIndex(**m) for m in index])
