"""`tensor`: raw arrays in and out. Each request is one input; the batch is the requests' inputs stacked.

Input per request, either:
- `.npy` bytes (numpy's format, recognised by its `\\x93NUMPY` magic), read with `allow_pickle=False`; the dtype
  is kept (bool, int8/16/32/64, uint8, float16/32/64);
- a JSON nested list of numbers (bytes/text, or the list the frontend already parsed): floats become float32
  (JSON has only float64, which the models' float32 weights would promote), integers int64, booleans bool.
Model-config `handler: {dtype: float32}` casts every input to that dtype (useful when clients send integers).

Shapes: the first request that decodes fixes the batch's input shape; a request of another shape answers 400
("expected (3, 224, 224) ... got (3, 32, 32)") and the others run. The model gets (batch, *shape) and must
return one tensor (batch, ...); request i gets row i.

Output per request: a JSON (nested) list, or `.npy` bytes when its Accept header prefers
`application/x-npy` or `application/octet-stream` (the response content type says which).
Bad input (neither .npy nor JSON, a ragged list, strings or objects, an unsupported dtype): a 400 that says so.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

import serve
from handlers.base_handler import BaseHandler
from serve.errors import InvalidInput
from serve.worker.context import Context

NPY_MAGIC = b"\x93NUMPY"
NPY_TYPES = ("application/x-npy", "application/octet-stream")
JSON_TYPE = "application/json"
DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")


class TensorHandler(BaseHandler):
    """`.npy` or JSON arrays in, the model's output rows out as JSON or `.npy`."""

    def initialize(self, context: Context) -> None:
        super().initialize(context)
        dtype = self.handler_config.get("dtype")
        if dtype is not None and dtype not in DTYPES:
            raise ValueError(f"model-config handler.dtype must be one of {list(DTYPES)}, got {dtype!r}")
        self.input_dtype = dtype
        self.rows: list[int] = []

    def preprocess(self, data: list[Any]) -> serve.Tensor | None:
        good, arrays = self.decode_rows(data, decode_array)
        self.rows = []
        batch: list[np.ndarray] = []
        for idx, array in zip(good, arrays):
            if batch and array.shape != batch[0].shape:
                message = f"input shape {array.shape} does not match the batch's {batch[0].shape}"
                self.row_error(idx, 400, message + ": every request to this model must send an array of the same shape")
                continue
            self.rows.append(idx)
            batch.append(array if self.input_dtype is None else array.astype(self.input_dtype))
        if not batch:
            return None
        return serve.from_numpy(np.stack(batch))  # (batch, *shape)

    def postprocess(self, data: Any) -> list[Any]:
        if not isinstance(data, serve.Tensor):
            raise RuntimeError(f"the tensor handler expects the model to return one tensor, got {type(data).__name__}")
        out = data.detach().cpu().numpy()
        if out.ndim == 0 or out.shape[0] != len(self.rows):
            raise RuntimeError(
                f"the model returned shape {out.shape} for a batch of {len(self.rows)}: its first dimension must be "
                "the batch"
            )
        return [self._encode(idx, row) for idx, row in zip(self.rows, out)]

    def _encode(self, idx: int, row: np.ndarray) -> Any:
        context = self.context  # set by handle() before postprocess runs
        if context is None:
            raise RuntimeError("postprocess ran outside handle(): the tensor handler needs the request context")
        accept = preferred_type(context.get_request_header(idx, "accept"))
        if accept in NPY_TYPES:
            context.set_response_content_type(idx, accept)
            buffer = io.BytesIO()
            np.save(buffer, np.ascontiguousarray(row), allow_pickle=False)
            return buffer.getvalue()
        context.set_response_content_type(idx, JSON_TYPE)
        return row.tolist()


def decode_array(payload: Any) -> np.ndarray:
    """One request's array from `.npy` bytes or JSON; InvalidInput says what was wrong."""
    if isinstance(payload, (bytes, bytearray)) and bytes(payload[:6]) == NPY_MAGIC:
        array = _load_npy(bytes(payload))
    else:
        array = _from_json(_parse_json(payload) if isinstance(payload, (bytes, bytearray, str)) else payload)
    if array.dtype.name not in DTYPES:
        raise InvalidInput(f"unsupported dtype {array.dtype} in the input: send one of {', '.join(DTYPES)}")
    return array


def _load_npy(data: bytes) -> np.ndarray:
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as e:
        if "allow_pickle" in str(e):
            raise InvalidInput("the .npy input holds Python objects (dtype object): send a numeric array") from None
        raise InvalidInput(f"the .npy input is truncated or malformed: {e}") from None
    except (EOFError, OSError) as e:
        raise InvalidInput(f"the .npy input is truncated or malformed: {e}") from None
    return array


def _parse_json(payload: bytes | bytearray | str) -> Any:
    try:
        return json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InvalidInput(
            f"the input is neither .npy (no \\x93NUMPY magic) nor JSON ({e}): send np.save() bytes or a nested list"
        ) from None


def _from_json(value: Any) -> np.ndarray:
    if not isinstance(value, (list, int, float)):
        raise InvalidInput(f"expected a nested list of numbers, got a JSON {type(value).__name__}")
    try:
        array = np.array(value)
    except ValueError:
        raise InvalidInput("the nested list is ragged: sub-lists at the same depth must have the same length") from None
    if array.dtype.kind not in "biuf":
        raise InvalidInput(f"the nested list holds non-numbers ({_first_non_number(value)!r}): send numbers only")
    return array.astype(np.float32) if array.dtype == np.float64 else array


def _first_non_number(value: Any) -> Any:
    if isinstance(value, list):
        for item in value:
            found = _first_non_number(item)
            if found is not None:
                return found
        return None
    return None if isinstance(value, (int, float)) else value


def preferred_type(accept: Any) -> str | None:
    """The media type an Accept header prefers most among JSON and .npy (q values honoured, ties in order)."""
    if not accept:
        return None
    ranked = []
    for position, part in enumerate(str(accept).split(",")):
        media, *params = (p.strip() for p in part.split(";"))
        q = next((_q(p[2:]) for p in params if p.lower().startswith("q=")), 1.0)
        if media.lower() in (*NPY_TYPES, JSON_TYPE) and q > 0:
            ranked.append((-q, position, media.lower()))
    return min(ranked)[2] if ranked else None


def _q(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0
