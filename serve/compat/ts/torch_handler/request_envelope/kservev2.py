"""`ts.torch_handler.request_envelope.kservev2.KServev2Envelope`: the Open Inference Protocol, as TorchServe's.

parse_input gives, per request, the list of its `inputs` (each `{"name", "shape", "datatype", "data"}`);
a request `id` is remembered for the answer. format_output answers ONE response for the batch:
`{"id", "model_name", "model_version", "outputs": [...]}`, one output per result, named "predict" (or
"explain"), with its numpy shape, the protocol datatype and the flattened data. Workflow requests
(`Workflow-Request-Type` header) read `outputs` instead of `inputs`, as TorchServe's.
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
        out = []
        for i, row in enumerate(data):
            kind = self.context.get_request_header(i, WORKFLOW_HEADER) if self.context else None
            key = "outputs" if kind else "inputs"
            if kind and str(kind).lower() == "nested":
                out.append({node: self._from_json(body, key).get("data") for node, body in row.items()})
            else:
                out.append(self._from_json(payload(row), key))
        return out

    def _from_json(self, body: Any, key: str = "inputs") -> Any:
        if isinstance(body, (bytes, bytearray)):
            body = json.loads(body.decode())
        if not isinstance(body, dict):
            raise ValueError(f'the KServe v2 envelope expects a JSON object {{"{key}": [...]}}')
        if "id" in body:
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
        response["outputs"] = [self._to_json(item) for item in data]
        return [response]

    def _to_json(self, data: Any) -> dict[str, Any]:
        array = np.array(data)
        explain = self.context.get_request_header(0, "explain") == "True"
        shape = list(array.shape)
        return {"name": "explain" if explain else "predict", "shape": shape, "datatype": _to_datatype(array.dtype),
                "data": (array.flatten() if shape else array).tolist()}  # fmt: skip
