"""`ts.torch_handler.request_envelope.kservev2.KServev2Envelope`: the Open Inference Protocol, as TorchServe's
(pytorch/serve ts/torch_handler/request_envelope/kservev2.py and its test_mnist_kf.py are the contract).

parse_input gives the handler the FIRST request's `inputs` list (each `{"name", "shape", "datatype", "data"}`), as
TorchServe's does: a numeric input's `data` reshaped to its `shape` (nested lists), a BYTES input's `data` its
first element; the input names and the request `id` are remembered for the answer. format_output answers ONE
response: `{"id", "model_name", "model_version", "outputs": [...]}`, result i named after input i (TorchServe's
`input-0` in, `input-0` out), its data flattened, its shape the flattened length (a scalar answer has shape [1]),
its datatype from the numpy dtype. A result past the inputs (TorchServe fails with an IndexError there) is named
`output-<i>`. Workflow requests (`Workflow-Request-Type` header) read `outputs` instead of `inputs`, per request.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from serve.compat.ts.torch_handler.request_envelope.base import BaseEnvelope, payload

_DATATYPE_TO_NUMPY = {
    "BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64", "INT8": "int8",
    "INT16": "int16", "INT32": "int32", "INT64": "int64", "FP16": "float16", "FP32": "float32", "FP64": "float64",
    "BYTES": "byte",
}  # fmt: skip
_NUMPY_TO_DATATYPE = {v: k for k, v in _DATATYPE_TO_NUMPY.items()} | {"object": "BYTES", "U": "BYTES"}
WORKFLOW_HEADER = "Workflow-Request-Type"


def _to_dtype(datatype: str) -> np.dtype:
    return np.dtype(_DATATYPE_TO_NUMPY[datatype])


def _to_datatype(dtype: np.dtype) -> str:
    name = str(dtype)
    return _NUMPY_TO_DATATYPE[name if name in _NUMPY_TO_DATATYPE else dtype.kind]


class KServev2Envelope(BaseEnvelope):
    def parse_input(self, data: list[Any]) -> list[Any]:
        if not self._workflow(0):
            inputs = self._from_json(payload(data[0]))
            if not isinstance(inputs, list):
                raise ValueError('the KServe v2 envelope expects {"inputs": [{"name", "shape", "datatype", "data"}]}')
            self.context.input_names = [str(i.get("name")) for i in inputs if isinstance(i, dict)]
            return [_shaped(i) for i in inputs]
        out = []
        for i, row in enumerate(data):
            kind = self._workflow(i)
            if kind and str(kind).lower() == "nested":
                out.append({node: self._from_json(body, "outputs").get("data") for node, body in row.items()})
            else:
                out.append(self._from_json(payload(row), "outputs" if kind else "inputs"))
        return out

    def _workflow(self, i: int) -> Any:
        return self.context.get_request_header(i, WORKFLOW_HEADER) if self.context else None

    def _from_json(self, body: Any, key: str = "inputs") -> Any:
        if isinstance(body, (bytes, bytearray)):
            body = json.loads(body.decode())
        if not isinstance(body, dict):
            raise ValueError(f'the KServe v2 envelope expects a JSON object {{"{key}": [...]}}')
        if body.get("id") and str(body["id"]).strip():  # TorchServe's: an empty id takes the server's
            self.context.input_request_id = body["id"]
        return body.get(key)

    def format_output(self, data: list[Any]) -> list[dict[str, Any]]:
        response: dict[str, Any] = {}
        request_id = getattr(self.context, "input_request_id", None)
        if request_id is not None:
            response["id"] = request_id
            del self.context.input_request_id
        else:
            response["id"] = self.context.get_request_id(0)
        model = (self.context.manifest or {}).get("model") if self.context.manifest else None
        if model:
            response["model_name"], response["model_version"] = model.get("modelName"), model.get("modelVersion")
        else:
            response["model_name"] = self.context.model_name
        names = getattr(self.context, "input_names", None) or []
        if hasattr(self.context, "input_names"):
            del self.context.input_names
        response["outputs"] = [_to_json(item, names[i] if i < len(names) else f"output-{i}")
                               for i, item in enumerate(data)]  # fmt: skip
        return [response]


def _shaped(spec: Any) -> Any:
    """A parsed input as TorchServe hands it over: numeric data in its shape, BYTES data its first element."""
    if not isinstance(spec, dict) or "data" not in spec:
        return spec
    if spec.get("datatype") == "BYTES":
        data = spec["data"]
        return {**spec, "data": data[0] if isinstance(data, list) and data else data}
    return {**spec, "data": np.array(spec["data"]).reshape(tuple(spec.get("shape") or [-1])).tolist()}


def _to_json(data: Any, name: str) -> dict[str, Any]:
    flat = np.array(data).flatten()  # TorchServe's answer: always the flattened data, shape its length
    return {"name": name, "datatype": _to_datatype(flat.dtype), "data": flat.tolist(), "shape": list(flat.shape)}
