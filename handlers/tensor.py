"""`tensor`: raw arrays in and out. Each request is one input; the batch is the requests' inputs stacked.

Input per request, either:
- `.npy` bytes (numpy's format, recognised by its `\\x93NUMPY` magic), read with `allow_pickle=False`; the dtype
  is kept (bool, int8/16/32/64, uint8, float16/32/64);
- a JSON nested list of numbers (bytes/text, or the list the frontend already parsed): floats become float32
  (JSON has only float64, which the models' float32 weights would promote), integers int64, booleans bool.
Model-config `handler: {dtype: float32}` casts every input to that dtype (useful when clients send integers).

Shapes: the model gets (batch, *shape) and must return one tensor (batch, ...); request i gets row i. Which shape
a request must send, decided so that one request's input never decides its batch-mates' answers:
- the model-config's declared input shape (`handler: {inputs: [{shape: [-1, 3, 224, 224]}]}`, -1 any size, the
  first the batch), when given, is checked as each request decodes: another shape is a 400 naming both;
- otherwise the requests of a batch are grouped by shape and dtype and each group runs through the model on its
  own (handlers/shape_groups.py): a batch of one shape is one forward as before, and a group the model fails on
  is, when the model answers other shapes (in this batch, an earlier one, or the model-config's
  `example_input_shape`), a 400 for that group's requests alone naming the shapes it answers ("the model failed
  on this request's input of shape (2, 3, 224, 224) float32 (...); it answers inputs of shape (3, 224, 224)
  float32"). A group per dtype too, because numpy would promote an integer request's batch-mates to float64,
  which the model refuses for all of them. Only when the model has answered no shape yet does a failing batch
  fail as a whole (503 "Prediction failed"): nothing then says the input is at fault. The declared shape is the
  way to have even a fresh worker's first request checked.
The shape most requests of a batch share was not chosen: a model that takes several sizes (a fully convolutional
one) would see its minority sizes refused, and a batch of two shapes one each would still depend on the order.

Output per request: a JSON (nested) list, or `.npy` bytes when its Accept header prefers
`application/x-npy` or `application/octet-stream` (the response content type says which).
Bad input (neither .npy nor JSON, a ragged list, strings or objects, an unsupported dtype, a `.npy` header that
claims more elements than its bytes hold, checked before numpy allocates them): a 400 that says so.

Warm-up: only when the model-config gives one request's shape, `example_input_shape: [3, 224, 224]` (in the
`handler:` section or at the top level): `example_inputs(b)` is then (b, *shape) in `handler.dtype` (float32).

Open Inference Protocol (v2) requests (serve/frontends/oip/core.py delivers them as TorchServe's kservev2 dict
`{"id", "inputs": [{"name", "datatype", "shape", "data"}], ...}`): the one input's first dimension is the batch,
so a v2 request brings `shape[0]` rows to the batch (a plain request brings one). Its answer is
`{"outputs": [{"name", "datatype", "shape", "data"}]}` with its rows, for every v2 request of a batch, whatever
the others are (TorchServe's kservev2 envelope looks only at the first request). Names: model-config
`handler: {inputs: [{name, datatype, shape}], outputs: [...]}` when given (an input of another name is a 400),
else any input name is taken and the output is `output0`. BYTES inputs are refused (the model takes numbers);
BF16 values become float32.
"""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any

import numpy as np

import serve
from handlers.base_handler import BaseHandler
from handlers.shape_groups import AnsweredShapes, Group, ShapeGroups, group_indices
from serve.errors import InvalidInput
from serve.worker.context import Context

NPY_MAGIC = b"\x93NUMPY"
NPY_TYPES = ("application/x-npy", "application/octet-stream")
JSON_TYPE = "application/json"
DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")
# v2 datatype <-> numpy dtype name, for the ones a model can take (BYTES cannot; BF16 arrives as FP32)
V2_TYPES = {"BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
            "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64", "FP16": "float16",
            "FP32": "float32", "FP64": "float64"}  # fmt: skip
V2_NAMES = {dtype: name for name, dtype in V2_TYPES.items()}
DEFAULT_OUTPUT = "output0"


class TensorHandler(BaseHandler):
    """`.npy` or JSON arrays in, the model's output rows out as JSON or `.npy`."""

    def initialize(self, context: Context) -> None:
        super().initialize(context)
        dtype = self.handler_config.get("dtype")
        if dtype is not None and dtype not in DTYPES:
            raise ValueError(f"model-config handler.dtype must be one of {list(DTYPES)}, got {dtype!r}")
        self.input_dtype = dtype
        self.input_name = _first_name(self.handler_config.get("inputs"), None)  # None: any name is taken
        self.output_name = _first_name(self.handler_config.get("outputs"), DEFAULT_OUTPUT) or DEFAULT_OUTPUT
        self.example_shape = example_input_shape(self.handler_config, self.model_yaml_config)
        self.declared_shape = _first_shape(self.handler_config.get("inputs"))  # (batch, ...), -1 any; None: any
        if self.example_shape is not None:  # warm-up runs it: a shape the model answers
            self.answered_shapes = AnsweredShapes([(self.example_shape, self.input_dtype or "float32")])

    def example_inputs(self, batch_size: int) -> tuple[serve.Tensor, ...] | None:
        """(batch, *example_input_shape) in the handler's input dtype (float32 by default), when the model-config
        gives the shape; else None."""
        if self.example_shape is None:
            return None
        return (self.example_tensor((batch_size, *self.example_shape), np.dtype(self.input_dtype or "float32")),)

    def preprocess(self, data: list[Any]) -> ShapeGroups:
        """The requests' arrays, each (n, *shape) (n = 1 for a plain request, shape[0] for a v2 one), concatenated
        per shape and dtype: one group of (rows, *shape) per kind of input in the batch."""
        good, decoded = self.decode_rows(data, self._decode)
        arrays = [array if self.input_dtype is None else array.astype(self.input_dtype) for array, _ in decoded]
        groups = ShapeGroups()
        for (shape, dtype), members in group_indices((a.shape[1:], a.dtype.name) for a in arrays).items():
            rows = [Row(good[i], len(arrays[i]), decoded[i][1]) for i in members]
            batch = serve.from_numpy(np.concatenate([arrays[i] for i in members]))  # (rows, *shape)
            groups.append(Group((shape, dtype), [r.idx for r in rows], batch, rows))
        return groups

    def _decode(self, payload: Any) -> tuple[np.ndarray, bool]:
        """(rows, is v2): a plain input is one row; a v2 request's input is its own batch."""
        if isinstance(payload, (bytes, bytearray)) and bytes(payload[:6]) != NPY_MAGIC:
            payload = _parse_json(payload)  # a v2 body that reached the handler undecoded
        if isinstance(payload, dict) and isinstance(payload.get("inputs"), list):
            rows, v2 = decode_v2(payload, self.input_name), True
        else:
            rows, v2 = decode_array(payload)[None], False
        check_declared_shape(rows.shape, self.declared_shape)
        return rows, v2

    def postprocess(self, data: Any) -> list[Any]:
        """One answer per request of the group being run (BaseHandler.handle sets `self.group`)."""
        if not isinstance(data, serve.Tensor):
            raise RuntimeError(f"the tensor handler expects the model to return one tensor, got {type(data).__name__}")
        if self.group is None:
            raise RuntimeError("postprocess ran outside handle(): the tensor handler needs the group of requests")
        rows: list[Row] = self.group.rows
        out = data.detach().cpu().numpy()
        total = sum(r.count for r in rows)
        if out.ndim == 0 or out.shape[0] != total:
            raise RuntimeError(
                f"the model returned shape {out.shape} for a batch of {total}: its first dimension must be the batch"
            )
        results = []
        start = 0
        for r in rows:
            part = out[start : start + r.count]
            start += r.count
            results.append(self._encode_v2(r.idx, part) if r.v2 else self._encode(r.idx, part[0]))
        return results

    def _encode_v2(self, idx: int, rows: np.ndarray) -> dict[str, Any]:
        """A v2 request's rows as `{"outputs": [one tensor]}` (the frontend adds model name, version and id)."""
        datatype = V2_NAMES.get(rows.dtype.name)
        if datatype is None:
            raise RuntimeError(f"the model returned dtype {rows.dtype}, which has no v2 datatype")
        self._require_context().set_response_content_type(idx, JSON_TYPE)
        return {"outputs": [{"name": self.output_name, "datatype": datatype, "shape": list(rows.shape),
                             "data": rows.reshape(-1).tolist()}]}  # fmt: skip

    def _require_context(self) -> Context:
        context = self.context  # set by handle() before postprocess runs
        if context is None:
            raise RuntimeError("postprocess ran outside handle(): the tensor handler needs the request context")
        return context

    def _encode(self, idx: int, row: np.ndarray) -> Any:
        context = self._require_context()
        accept = preferred_type(context.get_request_header(idx, "accept"))
        if accept in NPY_TYPES:
            context.set_response_content_type(idx, accept)
            buffer = io.BytesIO()
            np.save(buffer, np.ascontiguousarray(row), allow_pickle=False)
            return buffer.getvalue()
        context.set_response_content_type(idx, JSON_TYPE)
        return row.tolist()


@dataclasses.dataclass
class Row:
    """Request `idx` of the batch brought `count` rows; `v2`: answer it with v2 outputs."""

    idx: int
    count: int
    v2: bool


def example_input_shape(handler_config: dict[str, Any], model_config: dict[str, Any]) -> tuple[int, ...] | None:
    """`example_input_shape` (one request's shape, without the batch dimension) from the `handler:` section or the
    model-config's top level; None when absent, ValueError when it is not a list of positive integers."""
    shape = handler_config.get("example_input_shape", model_config.get("example_input_shape"))
    if shape is None:
        return None
    if not isinstance(shape, list) or not all(type(n) is int and n > 0 for n in shape):
        raise ValueError(f"model-config example_input_shape must be a list of positive integers (one request's "
                         f"shape, without the batch dimension), got {shape!r}")  # fmt: skip
    return tuple(shape)


def decode_v2(body: dict[str, Any], expected_name: str | None = None) -> np.ndarray:
    """The one input of a v2 request body as an array of its shape; InvalidInput says what was wrong."""
    inputs = body["inputs"]
    if len(inputs) != 1 or not isinstance(inputs[0], dict):
        raise InvalidInput(f"the tensor handler takes exactly one input tensor, got {len(inputs)}")
    spec = inputs[0]
    name, datatype, shape = spec.get("name"), spec.get("datatype"), spec.get("shape")
    if expected_name is not None and name != expected_name:
        raise InvalidInput(f"unknown input {name!r}: this model's input is {expected_name!r}")
    dtype = "float32" if datatype == "BF16" else V2_TYPES.get(str(datatype))  # BF16 values arrive as floats
    if dtype is None:
        raise InvalidInput(f"input {name!r}: datatype {datatype!r} is not numeric: send one of {', '.join(V2_TYPES)}")
    if not isinstance(shape, list) or not shape or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise InvalidInput(f"input {name!r}: shape must be a non-empty list of sizes, the first the batch: {shape!r}")
    try:
        array = np.array(spec.get("data"), dtype=dtype)
        return array.reshape(shape)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidInput(f"input {name!r}: data does not fit {datatype} of shape {shape}: {e}") from None


def check_declared_shape(shape: tuple[int, ...], declared: tuple[int, ...] | None) -> None:
    """InvalidInput naming both shapes when `shape` (batch, ...) contradicts the model-config's declared input
    shape (-1: any size; a declared shape one shorter is taken as given without the batch dimension)."""
    if declared is None:
        return
    actual = shape[1:] if len(declared) == len(shape) - 1 else shape
    if len(actual) != len(declared) or any(d not in (-1, n) for d, n in zip(declared, actual)):
        raise InvalidInput(f"input shape {list(shape)} contradicts the model-config's declared input shape "
                           f"{list(declared)} (-1: any size): send an array of that shape")  # fmt: skip


def _first_shape(specs: Any) -> tuple[int, ...] | None:
    """The shape of model-config `handler.inputs[0]`, when it is a list of integers."""
    if isinstance(specs, list) and specs and isinstance(specs[0], dict):
        shape = specs[0].get("shape")
        if isinstance(shape, list) and shape and all(type(n) is int for n in shape):
            return tuple(shape)
    return None


def _first_name(specs: Any, default: str | None) -> str | None:
    """The first tensor name of model-config `handler.inputs` / `handler.outputs`, else the default."""
    if isinstance(specs, list) and specs and isinstance(specs[0], dict) and "name" in specs[0]:
        return str(specs[0]["name"])
    return default


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
    _check_npy_size(data)
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as e:
        if "allow_pickle" in str(e):
            raise InvalidInput("the .npy input holds Python objects (dtype object): send a numeric array") from None
        raise InvalidInput(f"the .npy input is truncated or malformed: {e}") from None
    except (EOFError, OSError) as e:
        raise InvalidInput(f"the .npy input is truncated or malformed: {e}") from None
    return array


def _check_npy_size(data: bytes) -> None:
    """InvalidInput when the .npy header claims more elements than its bytes hold (numpy would first allocate
    the claimed size: a 100-byte request could ask for terabytes)."""
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(stream)
    except (ValueError, EOFError, OSError, SyntaxError, TypeError) as e:
        raise InvalidInput(f"the .npy input is truncated or malformed: {e}") from None
    if dtype.hasobject:
        return  # np.load refuses it with its own message
    count = 1
    for n in shape:
        count *= int(n)
    needed, held = count * dtype.itemsize, len(data) - stream.tell()
    if needed > held:
        raise InvalidInput(f"the .npy input is truncated or malformed: its header claims shape {tuple(shape)} of "
                           f"{dtype} ({needed} bytes) but it holds {held} bytes of data")  # fmt: skip


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
