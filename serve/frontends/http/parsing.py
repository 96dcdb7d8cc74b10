"""HTTP request -> `InferenceRequest`: TorchServe's rules for turning a body into the handler's input dict.

- `multipart/form-data` and `application/x-www-form-urlencoded`: one input per form field, named after it; file
  parts keep their content type, plain fields have none; a repeated name keeps the last value (TorchServe's
  backend builds a dict the same way).
- a `Content-Encoding: gzip|deflate` body is inflated first, bounded by `max_request_size` (encoding.py).
- anything else: the raw body is the one input `body`, with the request's MIME type (without its parameters).
- every request header goes to the handler (names lower-cased), plus TorchServe's `url_path` (the extra path
  segments after the version, "" otherwise) and `explain` ("True" for explanations, "False" for predictions).

Values stay bytes here; the request carries TorchServe's `decode_input_request` switch (on by default) and the
worker process decodes them (serve/batching/decoding.py): content type exactly `application/json` -> the parsed
JSON, `text/*` -> str, anything else bytes (the handler gets a bytearray).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request

from serve.batching import InferenceRequest
from serve.batching.decoding import mime_type
from serve.frontends.http.encoding import request_body
from serve.frontends.http.multipart import boundary_of, parse_multipart


async def inference_request(request: Request, url_path: str = "", explain: bool = False,
                            decode: bool = True) -> InferenceRequest:  # fmt: skip
    body = await request_body(request)
    return parse_request(body, dict(request.headers.items()), request.state.request_id, url_path, explain, decode)


def parse_request(body: bytes, headers: dict[str, str], request_id: str, url_path: str = "", explain: bool = False,
                  decode: bool = True) -> InferenceRequest:  # fmt: skip
    """The request of an (already inflated) body and the request's headers (lower-case names; the dict becomes
    the request's, with `url_path` and `explain` added)."""
    content_type = headers.get("content-type", "")
    mime = mime_type(content_type)
    inputs: dict[str, Any] = {}
    content_types: dict[str, str] = {}
    if mime == "multipart/form-data":
        for part in parse_multipart(body, boundary_of(content_type)):
            inputs[part.name] = part.data
            content_types.pop(part.name, None)
            if part.content_type:
                content_types[part.name] = part.content_type
    elif mime == "application/x-www-form-urlencoded":
        for name, value in parse_qsl(body.decode("ascii", "replace"), keep_blank_values=True):
            inputs[name] = value.encode("utf-8")
    else:
        inputs["body"] = body
        if mime:
            content_types["body"] = mime
    headers["url_path"] = url_path
    headers["explain"] = str(explain)
    return InferenceRequest(request_id, inputs, content_types, headers, explain, decode)
