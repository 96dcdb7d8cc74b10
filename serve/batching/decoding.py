"""TorchServe's `decode_input_request` rule: how a request's raw input bytes reach a handler.

Content type exactly `application/json` -> the parsed JSON (the raw bytes when it does not parse), `text/*` ->
str, anything else the bytes. JSON nested too deeply or with an integer over Python's digit limit is a
400 for that request alone. The worker process applies it (as TorchServe's Python backend does), not the
frontend: the server process, which every request crosses, then only moves bytes, and a JSON body is parsed
once, in the process that uses it.
"""

from __future__ import annotations

import json
from typing import Any

from serve.batching.json_values import DECODE_ERRORS, decode_error_text
from serve.errors import InvalidInput


def mime_type(content_type: str | None) -> str:
    """The MIME type of a Content-Type header value, lower-cased, without its parameters."""
    return (content_type or "").split(";")[0].strip().lower()


def decode_value(data: bytes | bytearray, content_type: str | None) -> Any:
    """The value a handler gets. JSON that is not JSON at all stays bytes, as TorchServe delivers it; JSON that
    Python cannot hold (nested too deeply, an integer over the digit limit) is InvalidInput: that request answers
    400, and the rest of its batch is served (worker/process.py)."""
    if content_type == "application/json":
        try:
            return json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return data
        except DECODE_ERRORS as e:
            raise InvalidInput(f"the JSON body cannot be decoded: {decode_error_text(e)}") from None
    if content_type and content_type.startswith("text"):
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            return data
    return data
