"""The protocol-free Open Inference Protocol (v2) model and calls, shared by REST (routers/oip.py) and gRPC.

A v2 request becomes ONE `InferenceRequest` for the model's batcher, like a `/predictions` call. The handler gets
TorchServe's kservev2-style input dict, always decoded (whatever `decode_input_request` says):

    {"body": {"id": "...", "inputs": [{"name", "datatype", "shape", "data": <flat row-major list>}],
              "outputs": [{"name"}], "parameters": {...}}}

(BYTES elements are strings, BF16 values floats; binary-extension parameters are removed), and the request header
`x-serve-protocol: v2`. A handler answers it with `{"outputs": [{"name", "datatype", "shape", "data"}]}` (a flat
or nested `data`); `handlers/tensor.py` does. An answer of another form (a handler that knows nothing of v2) becomes
one output as TorchServe's kservev2 envelope answers it: named after the request's (first) input (`input-0` in,
`input-0` out), its data flattened and its shape the flattened length (a scalar: [1]); numbers with the datatype
numpy infers (JSON floats as FP32), a JSON object (or a list holding objects) as BYTES of JSON text, so every
handler can be called over v2. When the request names exactly one output, the answer takes that name (a client
that asked for the metadata's `output0` gets it). The built-in image and text handlers get the request's one
input as their plain payload instead of the body (serve/batching/envelopes.py).

Model metadata comes from the archive's model-config `handler: {inputs: [...], outputs: [...]}` (each
`{name, datatype, shape}`, the shape with -1 for the batch dimension, as the client must send it); without it,
the `tensor` handler's defaults: one input `input0` and one output `output0`, datatype FP32 (or the
`handler.dtype`), shape [-1] (unknown). Decisions: live = the process answers; ready = `/ping`'s verdict
(every model has a worker, none gave up); a model is ready when one of its workers is READY; platform is
`serve_python`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

from serve import __version__
from serve.archive import shown
from serve.batching import InferenceRequest, envelopes, json_values
from serve.errors import InvalidInput, ModelNotFound, PredictionException
from serve.frontends.dataplane import DataPlane
from serve.frontends.oip import classification, tensors
from serve.frontends.oip.sequence import sequence_headers
from serve.frontends.request_ids import new_request_id

SERVER_NAME = "serve"
PLATFORM = "serve_python"
EXTENSIONS = ["binary_tensor_data", "model_configuration", "statistics", "model_repository", "classification"]
EXTENSIONS.append("sequence")  # Triton's sequence request parameters (oip/sequence.py)
PROTOCOL_HEADER = envelopes.PROTOCOL_HEADER
BINARY_PARAMETERS = ("binary_data_size", "binary_data", "binary_data_output")
DEFAULT_INPUT, DEFAULT_OUTPUT = "input0", "output0"


@dataclasses.dataclass
class InferInput:
    name: str
    datatype: str
    shape: list[int]
    data: np.ndarray
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RequestedOutput:
    name: str
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class InferRequest:
    inputs: list[InferInput]
    id: str = ""
    outputs: list[RequestedOutput] = dataclasses.field(default_factory=list)  # empty: every output
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class InferOutput:
    name: str
    datatype: str
    shape: list[int]
    data: np.ndarray
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class InferResponse:
    model_name: str
    outputs: list[InferOutput]
    model_version: str | None = None
    id: str = ""
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)


# ---- health and metadata ---------------------------------------------------------------------------------------


def server_live(dataplane: DataPlane) -> bool:
    """The process answers: always True when it can run this."""
    return True


def server_ready(dataplane: DataPlane) -> bool:
    """`/ping`'s verdict: every registered model has a worker that serves or is (re)starting."""
    return dataplane.ping()


def server_metadata() -> dict[str, Any]:
    return {"name": SERVER_NAME, "version": __version__, "extensions": list(EXTENSIONS)}


def model_ready(dataplane: DataPlane, model: str, version: str | None = None) -> bool:
    """True when one of the version's workers is READY; ModelNotFound for an unknown model or version."""
    (entry,) = dataplane.registry.describe(model, version)
    return any(w.get("status") == "READY" for w in entry.get("workers", []))


def model_metadata(dataplane: DataPlane, model: str, version: str | None = None) -> dict[str, Any]:
    """v2 model metadata {name, versions, platform, inputs, outputs}; ModelNotFound for an unknown model."""
    (entry,) = dataplane.registry.describe(model, version)
    config = _handler_config(dataplane, model, version)
    dtype = config.get("dtype")
    default = tensors.datatype_of(np.empty(0, dtype=dtype)) if isinstance(dtype, str) else "FP32"
    inputs = _tensor_specs(config.get("inputs"), "inputs",
                           [{"name": DEFAULT_INPUT, "datatype": default, "shape": [-1]}])  # fmt: skip
    outputs = _tensor_specs(config.get("outputs"), "outputs",
                            [{"name": DEFAULT_OUTPUT, "datatype": "FP32", "shape": [-1]}])  # fmt: skip
    return {"name": model, "versions": [str(entry["modelVersion"])], "platform": PLATFORM,
            "inputs": inputs, "outputs": outputs}  # fmt: skip


def _handler_config(dataplane: DataPlane, model: str, version: str | None) -> dict[str, Any]:
    """The archive's model-config `handler:` section."""
    config = dataplane.registry.model_config(model, version)
    handler = config.get("handler") if isinstance(config, dict) else None
    return handler if isinstance(handler, dict) else {}


def _tensor_specs(value: Any, key: str, default: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if value is None:
        return default
    if not isinstance(value, list):
        raise InvalidInput(f"model-config handler.{key} must be a list of {{name, datatype, shape}}, got {value!r}")
    out = []
    for spec in value:
        if not isinstance(spec, dict) or "name" not in spec:
            raise InvalidInput(f"model-config handler.{key} entries need a name, datatype and shape: got {spec!r}")
        shape = spec.get("shape", [-1])
        out.append({"name": str(spec["name"]), "datatype": tensors.normalize(spec.get("datatype", "FP32")),
                    "shape": [int(d) for d in shape]})  # fmt: skip
    return out


# ---- inference -------------------------------------------------------------------------------------------------


async def infer(dataplane: DataPlane, model: str, version: str | None, request: InferRequest,
                headers: dict[str, str] | None = None, explain: bool = False) -> InferResponse:  # fmt: skip
    """Run one v2 request through the model's batcher and return the handler's outputs (only the requested ones
    when `request.outputs` names some). `headers` (lower-cased names) are passed to the handler. `explain` takes
    the explanation path (the handler's `explain_handle`, TorchServe's `/explanations`). Raises the
    serving errors (`frontends.errors` maps them); a handler's error answer raises PredictionException with its
    status and message."""
    if not request.inputs:
        raise InvalidInput("the inference request has no inputs: send at least one {name, datatype, shape, data}")
    request_id = request.id or new_request_id()
    headers = {**(headers or {}), **sequence_headers(request.parameters)}  # Triton's sequence_* parameters
    job = InferenceRequest(
        request_id=request_id,
        inputs={"body": json.dumps(handler_body(request)).encode()},
        content_types={"body": "application/json"},
        headers={**(headers or {}), "content-type": "application/json", PROTOCOL_HEADER: "v2"},
        decode=True,
    )
    try:
        answer = await (dataplane.explain if explain else dataplane.predict)(model, version, job)
    except ModelNotFound as e:  # Triton's words first: its clients and examples match on them
        which = f"'{shown(model)}'" + (f" version {shown(version)}" if version else "")
        raise ModelNotFound(f"Request for unknown model: {which} is not found ({e})") from None
    body = answer.body
    if answer.chunks is not None:  # v2 has no streaming: a handler that yields answers with its chunks joined
        body = b"".join([chunk async for chunk in answer.chunks])
    if answer.status != 200:
        raise PredictionException(error_message(body), answer.status)
    outputs = _select(parse_handler_answer(body, answer.content_type, plain_output_name(request)), request.outputs)
    outputs = classification.classify_outputs(dataplane, model, version, outputs, request.outputs)
    model_version = version
    if model_version is None:  # the default version that answered (a dict lookup and a /proc read per worker)
        model_version = str(dataplane.registry.describe(model, None)[0]["modelVersion"])
    return InferResponse(model_name=model, model_version=model_version, id=request.id, outputs=outputs)


def handler_body(request: InferRequest) -> dict[str, Any]:
    """The JSON the handler receives as its `body` input (see the module docstring)."""
    body: dict[str, Any] = {
        "id": request.id,
        "inputs": [{"name": i.name, "datatype": i.datatype, "shape": list(i.shape),
                    "data": tensors.to_json(i.data, i.datatype), **_kept(i.parameters)}
                   for i in request.inputs],
        "outputs": [{"name": o.name} for o in request.outputs],
    }  # fmt: skip
    parameters = {k: v for k, v in request.parameters.items() if k not in BINARY_PARAMETERS}
    if parameters:
        body["parameters"] = parameters
    return body


def _kept(parameters: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in parameters.items() if k not in BINARY_PARAMETERS}
    return {"parameters": kept} if kept else {}


def plain_output_name(request: InferRequest) -> str:
    """The name a plain (not v2-shaped) handler answer gets: the one output the request names, else its first
    input's name, as TorchServe's kservev2 envelope names it."""
    return request.outputs[0].name if len(request.outputs) == 1 else request.inputs[0].name


def parse_handler_answer(body: bytes, content_type: str = "application/json",
                         name: str = DEFAULT_OUTPUT) -> list[InferOutput]:  # fmt: skip
    """A handler's answer as v2 outputs: `{"outputs": [...]}`, or any other JSON value as one flat output `name`
    (see the module docstring)."""
    try:
        value = json.loads(body)
    except json_values.DECODE_ERRORS:
        message = f"the handler answered {content_type or 'bytes'} that is not JSON: a v2 answer must be " + (
            '{"outputs": [{"name", "datatype", "shape", "data"}]}'
        )
        raise PredictionException(message, 500) from None
    if isinstance(value, dict) and isinstance(value.get("outputs"), list):
        return [_output(o) for o in value["outputs"]]
    if isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, dict) for v in value)):
        return [_json_output(value, name)]
    try:
        array = np.asarray(value)
        datatype = tensors.datatype_of(array)
    except (ValueError, InvalidInput) as e:
        raise PredictionException(f"the handler's answer is not a tensor ({e}): answer v2 outputs", 500) from None
    if array.dtype == np.float64:
        array, datatype = array.astype(np.float32), "FP32"  # JSON numbers: float32, as the tensor handler reads them
    flat = array.reshape(-1)  # TorchServe's kservev2 answer: flattened, shape [n]
    return [InferOutput(name, datatype, list(flat.shape), flat)]


def _json_output(value: dict[str, Any] | list[Any], name: str) -> InferOutput:
    """A JSON object answer (an image classifier's `{label: prob}`, a detector's list of boxes) as a BYTES output,
    one JSON text per element: a dict is one element, a list one per entry."""
    items = value if isinstance(value, list) else [value]
    data = np.empty(len(items), dtype=np.object_)
    data[:] = [json_values.dumps(v).encode() for v in items]
    return InferOutput(name, "BYTES", [len(items)], data)


def _output(spec: Any) -> InferOutput:
    if not isinstance(spec, dict) or not {"name", "datatype", "shape", "data"} <= spec.keys():
        raise PredictionException(f"the handler's v2 output {spec!r} needs name, datatype, shape and data", 500)
    try:
        data = tensors.from_json(spec["data"], spec["datatype"], spec["shape"], spec["name"])
    except InvalidInput as e:
        raise PredictionException(f"the handler's v2 output is malformed: {e}", 500) from None
    return InferOutput(str(spec["name"]), tensors.normalize(spec["datatype"]), list(spec["shape"]), data,
                       dict(spec.get("parameters") or {}))  # fmt: skip


def _select(outputs: list[InferOutput], requested: list[RequestedOutput]) -> list[InferOutput]:
    if not requested:
        return outputs
    by_name = {o.name: o for o in outputs}
    missing = [r.name for r in requested if r.name not in by_name]
    if missing:
        raise InvalidInput(f"requested output(s) {missing} are not among the model's outputs {list(by_name)}")
    return [dataclasses.replace(by_name[r.name], parameters=dict(by_name[r.name].parameters)) for r in requested]


def error_message(body: bytes) -> str:
    try:
        value = json.loads(body)
    except json_values.DECODE_ERRORS:
        return body.decode("utf-8", "replace")
    if isinstance(value, dict) and "message" in value:
        return str(value["message"])
    return json.dumps(value)
