"""How a handler's answers become bytes, and how its exceptions become error answers: shared by the batch runner
(process.py) and the continuous runner (continuous.py).

Results are serialised as TorchServe's backend does: bytes as they are, str as UTF-8, a Tensor as `serve.save`
bytes, anything else as JSON (indented as TorchServe, or compact for an answer the frontend re-encodes or a
streamed chunk). JSON results are standard JSON: NaN and Infinity are written as null.
"""

from __future__ import annotations

import io
import json
import logging
import traceback
from typing import Any

import serve
from serve.batching.json_values import dumps as json_dumps
from serve.errors import InvalidInput, PredictionException
from serve.worker import gpu

log = logging.getLogger("serve.worker")
# what TorchServe's clients would call bad input: a handler raising one of these answers 400, not 503
BAD_INPUT_ERRORS = (InvalidInput, json.JSONDecodeError, UnicodeDecodeError)


def batch_error(e: Exception, device: str | None = None, batch: int = 1) -> dict[str, Any]:
    """How a handler exception answers its batch: PredictionException's code (TorchServe's too), 400 when the
    input was bad (InvalidInput, the built-in handlers' checks; json.JSONDecodeError, UnicodeDecodeError), 507 when
    memory ran out (on `device`, None for the host), 500 for a CUDA error that ends the worker, else TorchServe's
    503 "Prediction failed" with the exception's text. The traceback goes to the worker's log.

    Unlike TorchServe, which answers 507 for any exception whose text contains "CUDA", only allocation failures
    are 507 here: a CUDA error from a bug is a 500 that says what it was."""
    if isinstance(e, PredictionException) or type(e).__name__ == "PredictionException":
        log.error("handler failed on a batch:\n%s", "".join(traceback.format_exception(e)).rstrip())
        code = getattr(e, "code", None) or getattr(e, "error_code", None) or 500
        return {"code": int(code), "type": "PredictionException", "message": getattr(e, "message", None) or str(e)}
    if isinstance(e, BAD_INPUT_ERRORS):
        log.warning("handler refused a batch's input: %s: %s", type(e).__name__, e)
        return {"code": 400, "type": "BadRequestException", "message": f"{type(e).__name__}: {e}"}
    log.error("handler failed on a batch:\n%s", "".join(traceback.format_exception(e)).rstrip())
    if gpu.is_out_of_memory(e):
        message = gpu.out_of_memory_message(e, gpu.exhausted_device(e, device), batch)
        return {"code": 507, "type": type(e).__name__, "message": message}
    if gpu.is_fatal(e):
        return {"code": 500, "type": type(e).__name__, "message": f"{type(e).__name__}: {e}"}
    return {"code": 503, "type": "InternalServerException", "message": f"Prediction failed: {type(e).__name__}: {e}"}


def serialize(value: Any, compact: bool = False) -> tuple[bytes, str]:
    """A handler result as body bytes and the content type its kind suggests; `compact` JSON for an answer the
    frontend re-encodes (TorchServe's indented JSON for one it sends as it is)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value), "application/octet-stream"
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass"), "text/plain; charset=utf-8"
    if isinstance(value, serve.Tensor):
        buffer = io.BytesIO()
        serve.save(value, buffer)
        return buffer.getvalue(), "application/octet-stream"
    layout: dict[str, Any] = {"separators": (",", ":")} if compact else {"indent": 2}
    return json_dumps(value, default=_json_default, **layout).encode(), "application/json"  # NaN, Infinity: null


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy arrays and scalars, serve tensors nested in a result
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable; return bytes, str or JSON-able values")


def error_body(code: int, message: str) -> bytes:
    return json.dumps({"code": code, "type": "InternalServerException", "message": message}, indent=2).encode()
