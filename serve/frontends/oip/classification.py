"""Triton's classification extension and the input `format` its image clients read, declared in the model-config:

    handler:
      inputs:
        - {name: INPUT__0, datatype: FP32, shape: [-1, 3, 224, 224], format: FORMAT_NCHW}
      outputs:
        - {name: OUTPUT__0, datatype: FP32, shape: [-1, 1000], label_filename: labels.txt}

- `format` (FORMAT_NONE, FORMAT_NHWC or FORMAT_NCHW; Triton's ModelInput.Format) is answered in the model config
  (`/config`, gRPC ModelConfig: repository.py); the v2 metadata has no place for it, as in Triton.
- `label_filename` names a file in the archive (packed with `--extra-files`), one label per line, line i for class
  i; it is answered in the model config as ModelOutput.label_filename.
- A requested output with the parameter `classification: k` (tritonclient's `class_count=k`) is answered as
  Triton does: the top k classes of each batch row (or of the whole tensor for a model without a batch dimension)
  by score, highest first, as BYTES strings "score:index:label", or "score:index" when the output has no label file
  (or the file has no line for that index). The score is printed as C's `%f` (Triton's std::to_string). The shape
  is [rows, k] (or [k]); k larger than the class count gives every class. Ties keep the lower index first.
- A classification of a BYTES output, or k < 1, is a 400 that says why.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from serve.errors import InvalidInput
from serve.frontends.dataplane import DataPlane

FORMATS = ("FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW")
PARAMETER = "classification"


def declared(handler_config: dict[str, Any], key: str, field: str) -> dict[str, str]:
    """Tensor name -> the `field` its `handler.<key>` entry declares (for those that declare it)."""
    specs = handler_config.get(key)
    out: dict[str, str] = {}
    for spec in specs if isinstance(specs, list) else []:
        if isinstance(spec, dict) and "name" in spec and spec.get(field) is not None:
            out[str(spec["name"])] = str(spec[field])
    if field == "format":
        wrong = {name: value for name, value in out.items() if value not in FORMATS}
        if wrong:
            raise InvalidInput(f"model-config handler.inputs format {wrong} is not one of {list(FORMATS)}")
    return out


def handler_config(dataplane: DataPlane, model: str, version: str | None) -> dict[str, Any]:
    config = dataplane.registry.model_config(model, version)
    handler = config.get("handler") if isinstance(config, dict) else None
    return handler if isinstance(handler, dict) else {}


def classify_outputs(dataplane: DataPlane, model: str, version: str | None, outputs: list[Any],
                     requested: list[Any]) -> list[Any]:  # fmt: skip
    """`outputs` (InferOutput) with each one requested with `classification: k` replaced by its top-k strings."""
    counts = {r.name: r.parameters[PARAMETER] for r in requested if PARAMETER in r.parameters}
    if not counts:
        return outputs
    config = handler_config(dataplane, model, version)
    files = declared(config, "outputs", "label_filename")
    shapes = {str(s.get("name")): s.get("shape") for s in config.get("outputs") or [] if isinstance(s, dict)}
    out = []
    for output in outputs:
        if output.name not in counts:
            out.append(output)
            continue
        labels = _labels(dataplane, model, version, files.get(output.name))
        shape = shapes.get(output.name)
        batched = isinstance(shape, list) and bool(shape) and shape[0] == -1
        data = top_k(output.data, _count(output.name, counts[output.name]), labels, batched)
        parameters = {k: v for k, v in output.parameters.items() if k != PARAMETER}
        out.append(dataclasses.replace(output, datatype="BYTES", shape=list(data.shape), data=data,
                                       parameters=parameters))  # fmt: skip
    return out


def top_k(scores: np.ndarray, k: int, labels: list[str] | None, batched: bool) -> np.ndarray:
    """The "score:index[:label]" strings (bytes) of each row's k best classes, as a [rows, k] (or [k]) array."""
    if not (np.issubdtype(scores.dtype, np.number) or scores.dtype == np.bool_):
        raise InvalidInput(f"classification needs a numeric output, this one holds {scores.dtype} values")
    rows = scores.reshape(scores.shape[0], -1) if batched and scores.ndim >= 1 else scores.reshape(1, -1)
    k = min(k, rows.shape[1])
    out = np.empty((rows.shape[0], k), dtype=np.object_)
    for r, row in enumerate(rows.astype(np.float64)):
        best = np.argsort(-row, kind="stable")[:k]  # stable: equal scores keep the lower index first
        for j, index in enumerate(best):
            text = f"{row[index]:f}:{index}"
            if labels is not None and index < len(labels):
                text += f":{labels[index]}"
            out[r, j] = text.encode()
    return out if batched else out.reshape(k)


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"output {name!r}: the classification parameter must be an integer >= 1, got {value!r}")
    return value


def _labels(dataplane: DataPlane, model: str, version: str | None, file: str | None) -> list[str] | None:
    if file is None:
        return None
    root = dataplane.registry.model_dir(model, version).resolve()
    path = (root / file).resolve()
    if not path.is_relative_to(root):
        raise InvalidInput(f"model {model}: the label file {file!r} its model-config names is outside the archive")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInput(f"model {model}: the label file {file!r} its model-config names cannot be read ({e}): "
                           "pack it into the archive with --extra-files") from None  # fmt: skip
    return text.splitlines()
