"""The v2 REST bodies: JSON (+ the binary tensor extension) <-> `InferRequest` / `InferResponse` (spec §1.3, §1.6).

Requests: any Content-Type (tritonclient sends none). With `Inference-Header-Content-Length`, the JSON part is
that long and each input with `parameters.binary_data_size` takes its bytes from the trailing blobs, in order.
Responses: an output is binary when its requested `parameters.binary_data` says so, else when the request's
`parameters.binary_data_output` does; any binary output makes the answer `application/octet-stream` with
`Inference-Header-Content-Length`, otherwise it is JSON. BF16 outputs are always binary (JSON cannot say BF16).
"""

from __future__ import annotations

import json
from typing import Any

from serve.batching import json_values
from serve.errors import InvalidInput
from serve.frontends.oip import tensors
from serve.frontends.oip.core import InferInput, InferRequest, InferResponse, RequestedOutput


def parse_request(body: bytes, header_length: str | None) -> InferRequest:
    """An `InferRequest` from a REST body and its `Inference-Header-Content-Length` header value (or None)."""
    length = None
    if header_length is not None:
        try:
            length = int(header_length)
        except ValueError:
            raise InvalidInput(f"Inference-Header-Content-Length must be an integer, got {header_length!r}") from None
    head, blobs = tensors.split_body(body, length)
    try:
        value = json.loads(head)
    except json_values.DECODE_ERRORS as e:
        why = json_values.decode_error_text(e)
        raise InvalidInput(f"the inference request is not JSON ({why}); binary tensors need the header "
                           "Inference-Header-Content-Length with the JSON part's length") from None  # fmt: skip
    if not isinstance(value, dict) or not isinstance(value.get("inputs"), list):
        raise InvalidInput('the inference request must be a JSON object with "inputs": [{name, datatype, shape, data}]')
    at = 0
    inputs = []
    for spec in value["inputs"]:
        if not isinstance(spec, dict) or not {"name", "datatype", "shape"} <= spec.keys():
            raise InvalidInput(f"each input needs name, datatype and shape: got {spec!r}")
        name, datatype, shape = str(spec["name"]), tensors.normalize(spec["datatype"]), spec["shape"]
        parameters = _parameters(spec, f"input {name!r}")
        size = parameters.get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or size < 0 or at + size > len(blobs):
                raise InvalidInput(f"input {name!r}: binary_data_size {size!r} does not fit the {len(blobs) - at} "
                                   "bytes left after the JSON part")  # fmt: skip
            data = tensors.from_bytes(blobs[at : at + size], datatype, shape, name)
            at += size
        elif "data" in spec:
            data = tensors.from_json(spec["data"], datatype, shape, name)
        else:
            raise InvalidInput(f"input {name!r} has neither data nor parameters.binary_data_size")
        inputs.append(InferInput(name, datatype, list(shape), data, parameters))
    if at != len(blobs):
        raise InvalidInput(f"{len(blobs) - at} bytes after the JSON part belong to no input's binary_data_size")
    outputs = []
    for spec in value.get("outputs") or []:
        if not isinstance(spec, dict) or "name" not in spec:
            raise InvalidInput(f"each requested output needs a name: got {spec!r}")
        outputs.append(RequestedOutput(str(spec["name"]), _parameters(spec, f"output {spec['name']!r}")))
    request_id = value.get("id", "")
    return InferRequest(
        inputs, str(request_id) if request_id is not None else "", outputs, _parameters(value, "request")
    )


def encode_response(response: InferResponse, request: InferRequest) -> tuple[bytes, int | None]:
    """(body, JSON header length or None when the body is plain JSON)."""
    binary_all = request.parameters.get("binary_data_output") is True
    wants = {o.name: o.parameters.get("binary_data") for o in request.outputs}
    blobs: list[bytes] = []
    outputs = []
    for out in response.outputs:
        choice = wants.get(out.name)
        binary = (choice if isinstance(choice, bool) else binary_all) or out.datatype == "BF16"
        entry: dict[str, Any] = {"name": out.name, "datatype": out.datatype, "shape": list(out.shape)}
        parameters = dict(out.parameters)
        if binary:
            blob = tensors.to_bytes(out.data, out.datatype)
            blobs.append(blob)
            parameters["binary_data_size"] = len(blob)
        else:
            entry["data"] = tensors.to_json(out.data, out.datatype)
        if parameters:
            entry["parameters"] = parameters
        outputs.append(entry)
    body: dict[str, Any] = {"model_name": response.model_name}
    if response.model_version is not None:
        body["model_version"] = response.model_version
    if response.id:
        body["id"] = response.id
    if response.parameters:
        body["parameters"] = response.parameters
    body["outputs"] = outputs
    head = json_values.dumps(body, separators=(",", ":")).encode()
    if not blobs:
        return head, None
    return tensors.join_body(head, blobs), len(head)


def _parameters(spec: dict[str, Any], where: str) -> dict[str, Any]:
    parameters = spec.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise InvalidInput(f"{where}: parameters must be a JSON object, got {parameters!r}")
    return parameters
