"""KServe envelopes opened before a handler that reads plain payloads (images, text) sees the request, as
TorchServe's `kserve` / `kservev2` request envelopes hand such handlers the payload inside.

The frontends tag a request with the header `x-serve-protocol`: `v1` for one KServe v1 instance (routers/
kserve_v1.py), `v2` for an Open Inference Protocol request (oip/core.py). A handler opts in with the class
attribute `kserve_envelopes = True` (the built-in vision and text handlers do; the `tensor` handler and user
handlers keep the whole v2 body they are documented to get). For an opted-in handler the worker replaces the
request's `body` input:

- v1: an instance `{"data": X}` becomes X (a base64 image string, a text), as TorchServe's vision handlers read
  `row.get("data")` from each instance; any other instance (`{"text": ...}`, a nested list) is left as it is.
- v2: the request's one input becomes its payload: a BYTES tensor of one element -> that element (text stays a
  str: base64 for an image, the text for a text handler; bytes that are not UTF-8, such as an encoded image sent
  in the binary extension or gRPC raw contents, are bytes again), a 1-D UINT8 tensor
  -> its bytes (an encoded image file), any other tensor -> its nested list of numbers by shape, with a leading
  batch dimension of 1 dropped from a 4-D (1, C, H, W) image.

Decision: one payload per request (the server batches requests itself): a v2 request with several inputs or a
BYTES tensor of several elements is a 400 saying so, instead of TorchServe's silently taking the first one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from serve.errors import InvalidInput

PROTOCOL_HEADER = "x-serve-protocol"


def open_envelope(inputs: dict[str, Any], protocol: str | None) -> dict[str, Any]:
    """`inputs` (the handler's input dict) with its `body` envelope opened for `protocol` ("v1", "v2"; anything
    else leaves it alone)."""
    body = inputs.get("body")
    if protocol == "v1" and isinstance(body, dict) and "data" in body:
        return {**inputs, "body": body["data"]}
    if protocol == "v2" and isinstance(body, dict) and isinstance(body.get("inputs"), list):
        return {**inputs, "body": v2_payload(body["inputs"])}
    return inputs


def _element(value: Any) -> Any:
    """A BYTES element: bytes that were not UTF-8 reach the worker as a str holding lone surrogates (the v2 core's
    surrogateescape): those are the client's raw bytes (an encoded image) again; any other str stays text."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogateescape")
    return value


def v2_payload(tensors: list[Any]) -> Any:
    """The one payload of a v2 request's inputs (see the module docstring)."""
    if len(tensors) != 1 or not isinstance(tensors[0], dict):
        raise InvalidInput(f"this model reads one input per request, got {len(tensors)}: send one image or text "
                           "per request (the server batches requests)")  # fmt: skip
    spec = tensors[0]
    datatype, shape, data = spec.get("datatype"), list(spec.get("shape") or []), spec.get("data")
    flat = data if isinstance(data, list) else [data]
    if datatype == "BYTES":
        if len(flat) != 1:
            raise InvalidInput(f"input {spec.get('name')!r} holds {len(flat)} BYTES elements: send one image or "
                               "text per request (the server batches requests)")  # fmt: skip
        return _element(flat[0])
    if datatype == "UINT8" and len(shape) == 1:
        return bytes(np.asarray(flat, dtype=np.uint8))
    array = np.asarray(flat).reshape(shape) if shape else np.asarray(flat)
    if array.ndim == 4 and array.shape[0] == 1:
        array = array[0]  # (1, C, H, W) -> (C, H, W): one image
    return array.tolist()
