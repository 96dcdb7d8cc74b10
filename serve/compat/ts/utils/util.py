"""`ts.utils.util`: TorchServe's handler utilities on serve.

    list_classes_from_module(module, parent_class=None)  the classes a module defines itself (optionally subclasses)
    load_label_mapping(path)        index_to_name.json as {"0": "label"} (list values -> their last element), or None
    map_class_to_label(probs, mapping=None, lbl_classes=None)   per row {label: prob}
    get_yaml_config(path)           a YAML file as a dict (yaml.safe_load)
    PredictionException(message, error_code=500)   answers the request(s) with that status code
    check_valid_pt2_backend, PT2Backend, deprecated      as TorchServe's
    load_compiled_extension(...)    raises: serve cannot load compiled torch extensions

Decisions: `map_class_to_label` answers a class missing from the mapping with its index string (TorchServe fails
the batch with a KeyError), and `PredictionException` is serve's, so the worker answers with its code as it
does for serve handlers (`error_code`, TorchServe's attribute, is kept beside serve's `code`).
"""

from __future__ import annotations

import enum
import inspect
import logging
import warnings
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from handlers import base_handler as _serve_base
from serve.errors import PredictionException as _ServePredictionException

logger = logging.getLogger(__name__)


class PT2Backend(enum.StrEnum):
    """torch.compile backends TorchServe names (serve runs none of them: see the base handler)."""

    EAGER = "eager"
    AOT_EAGER = "aot_eager"
    INDUCTOR = "inductor"
    ONNXRT = "onnxrt"
    IPEX = "ipex"
    OPENVINO = "openvino"
    TENSORRT = "tensorrt"


class PredictionException(_ServePredictionException):
    """TorchServe's PredictionException(message, error_code=500): the request is answered with `error_code`."""

    def __init__(self, message: str, error_code: int = 500) -> None:
        super().__init__(message, error_code)
        self.error_code = error_code

    def __str__(self) -> str:
        return f"{self.message} : {self.error_code}"


def list_classes_from_module(module: ModuleType, parent_class: type | None = None) -> list[type]:
    """The classes defined in `module` itself (not imported into it), in name order; subclasses of `parent_class`
    only when given."""
    classes = [
        member for _, member in inspect.getmembers(module, inspect.isclass) if member.__module__ == module.__name__
    ]
    if parent_class is not None:
        return [c for c in classes if issubclass(c, parent_class)]
    return classes


def load_label_mapping(mapping_file_path: str | Path) -> dict[str, str] | None:
    """index_to_name.json as {"0": "label"}; a list value becomes its last element; None (logged) when absent."""
    path = Path(mapping_file_path)
    mapping = _serve_base.load_label_mapping(path)
    if mapping is None:
        logger.warning("%r is missing. Inference output will not include class name.", str(path))
        return None
    out = {}
    for key, value in mapping.items():
        label = value[-1] if isinstance(value, list) and value else value
        if not isinstance(label, str):
            raise ValueError(f"{path.name}: labels must be strings or lists of strings, got {value!r} for {key!r}")
        out[str(key)] = label
    return out


def map_class_to_label(probs: list[list[float]], mapping: dict[str, Any] | None = None,
                       lbl_classes: list[list[int]] | None = None) -> list[dict[str, float]]:  # fmt: skip
    """Per row {label: prob} for classes `lbl_classes[row]` (default: every class of the row)."""
    if not isinstance(probs, list):
        raise TypeError(f"map_class_to_label takes a list of rows (call .tolist() first), got {type(probs).__name__}")
    if mapping is not None and not isinstance(mapping, dict):
        raise TypeError(f"map_class_to_label: mapping must be a dict, got {type(mapping).__name__}")
    return _serve_base.map_class_to_label(probs, mapping, lbl_classes)


def get_yaml_config(yaml_file_path: str | Path) -> dict[str, Any]:
    with open(yaml_file_path, encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


def check_valid_pt2_backend(backend: str) -> bool:
    if backend in {b.value for b in PT2Backend}:
        return True
    logger.warning("%s is not a supported backend", backend)
    return False


def load_compiled_extension(*args: Any, **kwargs: Any) -> None:
    """TorchServe loads a compiled torch C++/CUDA extension here; serve cannot run torch extensions."""
    raise RuntimeError(
        "load_compiled_extension: serve cannot load compiled PyTorch C++/CUDA extensions (they call libtorch). "
        "Write the operation with serve's tensor ops in the model file, or serve this model with TorchServe"
    )


def deprecated(version: str, replacement: str = "", klass: type[Warning] = PendingDeprecationWarning) -> Callable:
    """Marks a function deprecated: each call warns that it goes in `version` (TorchServe's decorator)."""

    def deprecator(func: Callable) -> Callable:
        @wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            warnings.warn(f"{func.__name__} is deprecated in {version} and moved to {replacement}", klass,
                          stacklevel=2)  # fmt: skip
            return func(*args, **kwargs)

        return wrapper

    return deprecator
