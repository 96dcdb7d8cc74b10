"""Management API parameters from the query string or a JSON body, typed, with 400 for a malformed value.

TorchServe's Gson is lenient with JSON bodies (numbers and booleans may come as strings), and so are we. Unlike
TorchServe, a value that is not a number where one is expected (`min_worker=abc`) is a 400 that names the
parameter and the value, not a silent fall back to the default.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request

from serve.batching import json_values
from serve.batching.decoding import mime_type
from serve.errors import InvalidInput


async def request_params(request: Request) -> dict[str, Any]:
    """Query parameters, overridden by the keys of a JSON object body (`Content-Type: application/json`)."""
    params: dict[str, Any] = dict(request.query_params)
    if mime_type(request.headers.get("content-type")) == "application/json":
        body = await request.body()
        if body.strip():
            try:
                data = json.loads(body)
            except json_values.DECODE_ERRORS as exc:  # deep nesting, an int over the digit limit too
                why = json_values.decode_error_text(exc)
                raise InvalidInput(f"the request body is not valid JSON: {why}") from None
            if not isinstance(data, dict):
                raise InvalidInput(f"the JSON body must be an object of parameters, got {type(data).__name__}")
            params.update(data)
    return params


def int_param(params: Mapping[str, Any], name: str) -> int | None:
    value = params.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidInput(f"Invalid {name}: {value!r}; it must be an integer")
    try:
        return int(value)
    except ValueError:
        raise InvalidInput(f"Invalid {name}: {value!r}; it must be an integer") from None


def bool_param(params: Mapping[str, Any], name: str, default: bool) -> bool:
    value = params.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise InvalidInput(f"Invalid {name}: {value!r}; it must be true or false")


def str_param(params: Mapping[str, Any], name: str) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise InvalidInput(f"Invalid {name}: {value!r}; it must be a string")
    return str(value)
