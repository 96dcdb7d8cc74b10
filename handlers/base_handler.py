"""`BaseHandler`: TorchServe's handler contract (`ts/torch_handler/base_handler.py`) on serve's runtime.

    initialize(context)  -> picks the device, `self.model = self.load_model(context)`, reads index_to_name.json
    handle(data, context) -> preprocess -> inference -> postprocess, one result per request

`data` is what TorchServe delivers: a list with one dict per request, the payload under "data" or "body"
(bytes, or JSON the frontend already parsed). `load_model` imports the manifest's `modelFile` (with torch
compatibility when the manifest or model-config asks for it), builds its single `nn.Module` subclass with no
arguments and loads `serializedFile` with `serve.load` + `find_state_dict`, strictly. A handler that builds its
model itself overrides `load_model`. Built-in handlers read their settings from the model-config's `handler:`
section, available as `self.handler_config`.

Devices and dtypes: the model runs on `cuda:<gpu_id>` when the server gave the worker a GPU and CUDA is usable,
else on the CPU. The model-config's top-level `dtype` (ours: float32, the default, float16 or bfloat16) converts
the model's floating-point weights and buffers after loading (`model.half()` / `model.bfloat16()`, on the CPU
as well as on a GPU). `inference` moves the input tensors (also inside tuples, lists and dicts) to the device and
casts the floating ones to that dtype, and hands float16/bfloat16 outputs back as float32, so postprocess and
the answers' number formatting do not change. A handler that overrides `inference` calls `self.model_input(x)`
and `self.model_output(y)` to do the same.

Warm-up (ours): `example_inputs(batch_size)` returns what `inference` passes the model for a batch of that size,
or None (the default) when the shape is not known; the worker warms its optimized model up with it before it
reports ready (serve/worker/optimizing.py). The vision, text and tensor handlers implement it.

Streaming: `handle` may return an iterator (each item: one chunk per request), or call TorchServe's
`send_intermediate_predict_response(ret_list, context.request_ids, message, code, context)` (from
`ts.handler_utils.utils`) for each chunk and return the last. REST answers chunked, gRPC StreamPredictions one
message per chunk. Continuous mode (ours; what TorchServe's `continuousBatching: true` asks for): a handler class
with `continuous = True` gets no batches; each request arrives alone as soon as the server has it, while others run:

    def submit(self, request_id, data, context, emit): ...  # return at once; emit(body, final=False, code=200)
    def cancel(self, request_id): ...                        # the client went away, or its deadline passed

`emit` may be called from any thread; each call is one chunk (bytes, str, or a JSON value written compactly); the
first final emit with code >= 400 is the request's error. serve/worker/continuous.py has the details; the model-
config's `continuousMaxInFlight` (256) bounds the requests each worker holds.

Where we differ from TorchServe, on purpose:
- Per-request errors. `decode_rows(data, fn)` decodes each request on its own; a request whose input is bad
  (`fn` raises ValueError, RecursionError, InvalidInput or PredictionException) answers with its own status code
  and the body `{"code": ..., "type": ..., "message": ...}`, and the batch carries on with the other requests
  (TorchServe fails the whole batch). A preprocess that returns `ShapeGroups` (handlers/shape_groups.py) has each
  group of one input shape run through inference and postprocess on its own, and a failure the group's input
  explains answers only that group; the default preprocess does so when the requests' arrays differ in shape
  (one shape: the stacked tensor, as before). Any other error outside a row still fails the whole batch.
- `explain_handle` raises PredictionException(501) unless the handler implements `get_insights` (TorchServe
  raises AttributeError); `describe_handle` returns None, as TorchServe's.
- A handler module used by name must define exactly one class, as TorchServe's loader requires.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import serve
from handlers.shape_groups import AnsweredShapes, Group, ShapeGroups, group_indices, run_groups
from serve.errors import InvalidInput, PredictionException
from serve.nn.state_dict import StateDictMismatchError
from serve.serialization import find_state_dict
from serve.worker.context import Context
from serve.worker.handler_loader import classes_defined_in, import_user_file
from serve.worker.torch_compat import torch_compat_enabled

logger = logging.getLogger(__name__)

RowDecoder = Callable[[Any], Any]
# the model-config's `dtype` values (checked at registration; see serve/management/model_version.py)
MODEL_DTYPES = {"float32": serve.float32, "float16": serve.float16, "bfloat16": serve.bfloat16}
HALF_DTYPES = (serve.float16, serve.bfloat16)


class BaseHandler:
    """Loads the archive's model and answers batches; subclasses override preprocess/inference/postprocess."""

    def __init__(self) -> None:
        self.model: Any = None
        self.mapping: dict[str, Any] | None = None
        self.device: Any = None
        self.dtype: Any = serve.float32  # the model's floating-point dtype (model-config `dtype`)
        self.product_dtype = "float32"  # the inference plan's products ("bfloat16": model-config dtype on the CPU)
        self.product_quantization: str | None = None  # "int8": the plan's linear layers quantised (model-config)
        self.initialized = False
        self.context: Context | None = None
        self.manifest: dict[str, Any] | None = None
        self.model_dir = Path(".")
        self.model_yaml_config: dict[str, Any] = {}
        self.handler_config: dict[str, Any] = {}
        self.explain = False
        self._row_errors: dict[int, dict[str, Any]] = {}
        self.group: Group | None = None  # the group of one shape being run (ShapeGroups)
        self.answered_shapes = AnsweredShapes()  # the input shapes the model has answered

    # ---- loading -------------------------------------------------------------------------------------------

    def initialize(self, context: Context) -> None:
        properties = context.system_properties
        self.context = context
        self.manifest = context.manifest
        self.model_dir = Path(properties["model_dir"])
        self.model_yaml_config = context.model_yaml_config or {}
        self.handler_config = self.model_yaml_config.get("handler") or {}
        self.device = select_device(properties.get("gpu_id"))
        self.dtype = model_dtype(self.model_yaml_config)
        if self.dtype is serve.bfloat16 and self.device.type == "cpu":
            # on the CPU, bfloat16 is a product precision, not a storage one: weights and activations stay
            # float32 and the worker's inference plan multiplies in bfloat16 (float32 accumulation) where the CPU
            # has AVX512-BF16; elsewhere, and with `optimize: false`, everything runs in float32
            self.dtype, self.product_dtype = serve.float32, "bfloat16"
            logger.info("dtype bfloat16 on the CPU: float32 weights and activations, bfloat16 products in the "
                        "inference plan where the CPU has AVX512-BF16 (float32 elsewhere)")  # fmt: skip
        self.product_quantization = model_quantization(self.model_yaml_config)
        self.model = self.convert_model(self.load_model(context))
        self.mapping = load_label_mapping(self.model_dir / "index_to_name.json")
        self.initialized = True

    def load_model(self, context: Context) -> Any:
        """The manifest's model file's single Module class, built with no arguments, loaded, in eval mode."""
        model_info = (context.manifest or {}).get("model") or {}
        model_file = model_info.get("modelFile")
        if not model_file:
            raise RuntimeError(
                f"model {context.model_name!r} has no model file (manifest model.modelFile): archive it with "
                "model-archiver --model-file model.py, or override load_model() in the handler to build the model"
            )
        compat = torch_compat_enabled(context.manifest, context.model_yaml_config, self.model_dir)
        module = import_user_file(self.model_dir, model_file, torch_compat=compat)
        classes = classes_defined_in(module, serve.nn.Module)
        if len(classes) != 1:
            names = ", ".join(c.__name__ for c in classes) or "none"
            raise ValueError(
                f"model file {model_file!r} must define exactly one nn.Module subclass to build, found {len(classes)} "
                f"({names}): move helper modules to another file, or override load_model() in the handler"
            )
        model = classes[0]()
        serialized = model_info.get("serializedFile")
        if serialized:
            checkpoint = serve.load(self.model_dir / serialized, map_location="cpu")
            try:
                model.load_state_dict(find_state_dict(checkpoint), strict=True)
            except StateDictMismatchError as exc:  # the archive's files do not fit each other: say which
                raise StateDictMismatchError(f"{serialized} does not fit the model of {model_file}: {exc}") from None
        else:
            logger.warning("model %s has no serialized file: serving the weights its constructor makes", model_file)
        return self.convert_model(model.eval()).to(self.device)  # converted first: half the bytes to move

    def convert_model(self, model: Any) -> Any:
        """The model in the model-config's dtype (a no-op for float32 and for a model already converted)."""
        if self.dtype is serve.float32 or model is None:
            return model
        method = "half" if self.dtype is serve.float16 else "bfloat16"
        if not callable(getattr(model, method, None)):
            raise TypeError(f"model-config dtype {self.dtype} needs an nn.Module to convert (model.{method}()), got "
                            f"{type(model).__name__}: override convert_model() in the handler")  # fmt: skip
        return getattr(model, method)()

    # ---- the batch -----------------------------------------------------------------------------------------

    def handle(self, data: list[Any], context: Context) -> list[Any]:
        """One result per request: TorchServe's flow (describe, explain, HandlerTime) plus per-request errors."""
        start = time.perf_counter()
        self.context = context
        self._row_errors = {}
        if self._is_describe():
            output = [self.describe_handle()]
        else:
            preprocessed = self.preprocess(data)
            if self._is_explain():
                output = self.explain_handle(self._one_group(preprocessed), data)
            elif len(self._row_errors) == len(data):
                output = []  # every request was rejected: nothing to run
            elif isinstance(preprocessed, ShapeGroups):
                output = run_groups(preprocessed, self._run_group, self.answered_shapes, self.row_error)
            else:
                output = self.postprocess(self.inference(preprocessed))
            output = self._merge_row_errors(output, len(data))
        context.metrics.add_time("HandlerTime", round((time.perf_counter() - start) * 1000, 2), None, "ms")
        return output

    def preprocess(self, data: list[Any]) -> Any:
        """Each request's number or nested list (JSON) stacked into one batch tensor; ShapeGroups when the requests'
        shapes differ."""
        good, decoded = self.decode_rows(data, _json_value)
        groups = group_indices(shape for _, shape in decoded)
        values = [value for value, _ in decoded]
        if len(groups) <= 1:
            return serve.as_tensor(values)
        return ShapeGroups(
            Group((shape, ""), [good[i] for i in members], serve.as_tensor([values[i] for i in members]))
            for shape, members in groups.items()
        )

    def _run_group(self, group: Group) -> list[Any]:
        self.group = group
        try:
            return self.postprocess(self.inference(group.batch))
        finally:
            self.group = None

    def _one_group(self, preprocessed: Any) -> Any:
        """An explanation's batch: the largest group of one shape (the first of equals); the requests of other
        shapes are answered 400."""
        if not isinstance(preprocessed, ShapeGroups):
            return preprocessed
        if not preprocessed:
            return None
        kept = max(preprocessed, key=lambda g: len(g.indices))
        for group in preprocessed:
            if group is not kept:
                for idx in group.indices:
                    self.row_error(idx, 400, f"input of shape {group.key[0]} does not match this explanation batch's "
                                             f"{kept.key[0]}: explain inputs of one shape together")  # fmt: skip
        return kept.batch

    def inference(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        with serve.no_grad():
            return self.model_output(self.model(self.model_input(data), *args, **kwargs))

    def model_input(self, data: Any) -> Any:
        """Tensors in `data` (nested in tuples, lists, dicts too) on the model's device, floating ones in its dtype."""
        cast = self.dtype if self.dtype is not serve.float32 else None
        return _map_tensors(data, lambda t: t.to(self.device, cast if cast and t.is_floating_point() else None))

    def model_output(self, output: Any) -> Any:
        """float16/bfloat16 tensors in `output` (nested too) as float32; everything else as it is."""
        if self.dtype is serve.float32:
            return output
        return _map_tensors(output, lambda t: t.float() if t.dtype in HALF_DTYPES else t)

    def postprocess(self, data: Any) -> list[Any]:
        return data.tolist()

    def explain_handle(self, data_preprocess: Any, raw_data: list[Any]) -> Any:
        """TorchServe's explanation flow when the handler implements `get_insights`, else a 501 error."""
        get_insights = getattr(self, "get_insights", None)
        if get_insights is None:
            raise PredictionException(
                f"explanations are not supported by {type(self).__name__}: implement get_insights() to provide them",
                501,
            )
        row = raw_data[0] if raw_data else {}
        inputs = _payload(row)
        target = (row.get("target") if isinstance(row, dict) else None) or 0
        return get_insights(data_preprocess, inputs, target)

    def describe_handle(self) -> Any:
        return None

    # ---- per-request errors --------------------------------------------------------------------------------

    def decode_rows(self, data: list[Any], fn: RowDecoder) -> tuple[list[int], list[Any]]:
        """`fn(payload)` for each request: (indices of the requests that decoded, their values), errors recorded."""
        good: list[int] = []
        values: list[Any] = []
        for idx, row in enumerate(data):
            payload = _payload(row)
            if payload is None:
                self.row_error(idx, 400, "the request has no input: send it as the request body or a 'data' field")
                continue
            try:
                value = fn(payload)
            except PredictionException as e:
                self.row_error(idx, e.code, e.message, type(e).__name__)
            except (InvalidInput, ValueError) as e:  # ValueError: json's too (bad JSON, an int over the digit limit)
                self.row_error(idx, 400, str(e), "InvalidInput")
            except RecursionError:  # JSON (or a list) nested too deeply
                self.row_error(idx, 400, "the input is nested too deeply", "InvalidInput")
            else:
                good.append(idx)
                values.append(value)
        return good, values

    def row_error(self, idx: int, code: int, message: str, error_type: str = "InvalidInput") -> None:
        """Answer request `idx` with this error; the other requests of the batch carry on."""
        self._row_errors[idx] = {"code": code, "type": error_type, "message": message}
        if self.context is not None:
            self.context.set_response_status(code, message, idx)

    def _merge_row_errors(self, output: list[Any], n: int) -> list[Any]:
        if not self._row_errors:
            return output
        good = [i for i in range(n) if i not in self._row_errors]
        if len(output) != len(good):
            raise RuntimeError(
                f"{type(self).__name__} returned {len(output)} results for the {len(good)} requests that decoded "
                f"(of {n}): postprocess must return one result per request that preprocess accepted"
            )
        results: list[Any] = [self._row_errors.get(i) for i in range(n)]
        for i, value in zip(good, output):
            results[i] = value
        return results

    def _is_describe(self) -> bool:
        return self.context is not None and self.context.get_request_header(0, "describe") == "True"

    def _is_explain(self) -> bool:
        if self.context is not None and self.context.get_request_header(0, "explain") == "True":
            self.explain = True
            return True
        return False

    def get_device(self) -> Any:
        return self.device

    # ---- warm-up -------------------------------------------------------------------------------------------

    def example_inputs(self, batch_size: int) -> tuple[Any, ...] | None:
        """The positional arguments `inference` would pass the model for a batch of `batch_size` (on the model's
        device, in its dtype), for the worker to warm the optimized model up before it reports ready; None (the
        default: the input shape is not known) plans each batch size at its first batch instead."""
        return None

    def example_tensor(self, shape: tuple[int, ...], dtype: Any = None) -> Any:
        """Seeded standard-normal values of `shape` (float32, or the numpy `dtype` given), through `model_input`:
        on the model's device, floating ones in its dtype, as a real batch."""
        values = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
        return self.model_input(serve.from_numpy(values if dtype is None else values.astype(dtype)))


def model_dtype(model_config: dict[str, Any]) -> Any:
    """The serve dtype named by the model-config's `dtype` (float32 when absent)."""
    name = model_config.get("dtype")
    if name is None:
        return serve.float32
    if name not in MODEL_DTYPES:
        raise ValueError(f"model-config dtype {name!r} is not valid: expected one of {', '.join(MODEL_DTYPES)}")
    return MODEL_DTYPES[name]


def model_quantization(model_config: dict[str, Any]) -> str | None:
    """The model-config's `quantization` (ours, for the CPU inference plan): None, or "int8" (linear layers run
    dynamically quantised int8 products where the CPU has AVX512-VNNI; serve.inference.optimize)."""
    value = model_config.get("quantization")
    if value is None:
        return None
    if value != "int8":
        raise ValueError(f"model-config quantization {value!r} is not valid: use int8, or leave it out for float32")
    if model_config.get("dtype") not in (None, "float32"):
        raise ValueError(f"model-config quantization int8 with dtype {model_config.get('dtype')!r}: choose one "
                         "(int8 products keep float32 weights and activations)")  # fmt: skip
    return "int8"


def _map_tensors(value: Any, fn: Callable[[Any], Any]) -> Any:
    """`fn` applied to every Tensor in `value`, through tuples, lists and dicts (other values kept)."""
    if isinstance(value, serve.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_map_tensors(v, fn) for v in value)
    if isinstance(value, tuple):  # a named tuple
        return type(value)(*(_map_tensors(v, fn) for v in value))
    return value


def select_device(gpu_id: int | None) -> Any:
    """`cuda:<gpu_id>` when a GPU id is set and CUDA is usable, else the CPU."""
    if gpu_id is not None and serve.cuda.is_available():
        return serve.device(f"cuda:{gpu_id}")
    return serve.device("cpu")


def load_label_mapping(path: Path) -> dict[str, Any] | None:
    """index_to_name.json as `{"0": name}` (or `{"0": [wnid, name]}`); None when the file is absent.

    The legacy `{"object_type_names": [...]}` form is turned into `{"0": ..., "1": ...}`, as TorchServe does.
    """
    if not path.is_file():
        return None
    try:
        mapping = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f'{path.name} is not valid JSON ({e}): expected {{"0": "label", ...}}') from e
    if not isinstance(mapping, dict):
        raise ValueError(f'{path.name} must hold a JSON object {{"0": "label", ...}}, got {type(mapping).__name__}')
    if "object_type_names" in mapping:
        names = mapping["object_type_names"]
        if not isinstance(names, list):
            raise ValueError(f"{path.name}: object_type_names must be a list, got {type(names).__name__}")
        mapping = {str(i): name for i, name in enumerate(names)}
    return mapping


def map_class_to_label(probs: list[list[float]], mapping: dict[str, Any] | None = None,
                       lbl_classes: list[list[int]] | None = None) -> list[dict[str, float]]:  # fmt: skip
    """TorchServe's `map_class_to_label`: per row `{label: prob}` for classes `lbl_classes[row]` (default: all).

    The label is `mapping[str(class)]` (the last element when the value is a list, as `[wnid, name]`), or the
    class index as a string when there is no mapping or the mapping lacks that class.
    """
    if lbl_classes is None:
        lbl_classes = [list(range(len(row))) for row in probs]
    return [
        {_label(mapping, int(cls)): prob for cls, prob in zip(classes, row)} for classes, row in zip(lbl_classes, probs)
    ]


def _label(mapping: dict[str, Any] | None, cls: int) -> str:
    value = mapping.get(str(cls)) if mapping is not None else None
    if isinstance(value, list) and value:
        value = value[-1]
    return str(value) if value is not None else str(cls)


def _payload(row: Any) -> Any:
    """A request's input as TorchServe delivers it: row["data"], else row["body"]; None when absent or empty."""
    if not isinstance(row, dict):
        return row
    value = row.get("data")
    if value is None or (isinstance(value, (bytes, bytearray, str)) and not value):
        value = row.get("body")
    if isinstance(value, (bytes, bytearray, str)) and not value:
        return None
    return value


def _json_value(payload: Any) -> tuple[Any, tuple[int, ...]]:
    """A number or nested list, from JSON bytes/text or already parsed, and its shape."""
    if isinstance(payload, (bytes, bytearray, str)):
        try:
            payload = json.loads(payload)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InvalidInput(f"expected a JSON number or nested list of numbers, could not parse it: {e}") from e
    if isinstance(payload, bool) or not isinstance(payload, (int, float, list)):
        raise InvalidInput(f"expected a number or nested list of numbers, got {type(payload).__name__}")
    try:
        return payload, tuple(serve.as_tensor(payload).shape)
    except (ValueError, TypeError, OverflowError) as e:
        raise InvalidInput(f"expected a number or a rectangular nested list of numbers: {e}") from None
