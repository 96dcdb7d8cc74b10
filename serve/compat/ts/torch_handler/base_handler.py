"""`ts.torch_handler.base_handler.BaseHandler`: TorchServe's base handler on serve's (handlers/base_handler.py).

TorchServe's attributes (model, mapping, device, initialized, context, manifest, map_location, model_pt_path,
explain, target, profiler_args, model_yaml_config) and methods (initialize, _load_pickled_model, preprocess,
inference, postprocess, handle, explain_handle, describe_handle, _is_explain, _is_describe, get_device), with
TorchServe's loading: the manifest's `modelFile` is imported (with `import torch` resolved to serve), its one
`nn.Module` class built with no arguments, and `serializedFile` loaded into it as a state_dict (`serve.load`
plays `torch.load`). preprocess, inference and postprocess are `timed` (handler `profile: true` in the
model-config records `ts_handler_<method>`), as in TorchServe.

Decision: this is serve's BaseHandler with TorchServe's names added, not a port of TorchServe's, so a TorchServe
handler gets serve's devices, model-config `dtype`, per-request 4xx errors and inference plan. A subclass that
overrides preprocess/inference/postprocess the TorchServe way (reading `row.get("data") or row.get("body")`,
building tensors with `torch.*`) works as written. A subclass whose `__init__` does not call `super().__init__()`
(TorchServe's micro-batching example) still gets every attribute at `initialize`.

What TorchServe does through torch and serve cannot raises a RuntimeError at initialize (the model then fails to
load with that message; no request ever sees a 500): a TorchScript archive (a `.pt` serialized file and no
model file), an ONNX or TensorRT session (`.onnx`), a torch.export AOT library (`.so`, or model-config
`pt2: {export: {aot_compile: true}}`), IPEX (`TS_IPEX_ENABLE=true`, TorchServe's switch), the torch profiler
(`ENABLE_TORCH_PROFILER`). Each message names the feature and what to do instead. `torch.compile` (model-config
`pt2: {compile: {enable: true, ...}}` or a backend name, as TorchServe's vgg_16 example ships) is a warning and the
eager model: it only makes the same model faster, which serve's inference plan does at load anyway.
Where we differ: the model file may define helper classes beside its one nn.Module (TorchServe wants exactly
one class of any kind).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import serve
from handlers import base_handler as serve_base
from serve.compat.ts.handler_utils.timer import timed
from serve.compat.ts.utils.util import list_classes_from_module, load_label_mapping
from serve.serialization import find_state_dict
from serve.worker.context import Context
from serve.worker.handler_loader import import_user_file

logger = logging.getLogger(__name__)

EAGER_ADVICE = (
    "archive the eager model instead: model-archiver --model-file model.py (the nn.Module class) "
    "--serialized-file model.pt (torch.save(model.state_dict(), 'model.pt'))"
)


class BaseHandler(serve_base.BaseHandler):
    """TorchServe's BaseHandler: loads the eager model of the archive; preprocess -> inference -> postprocess."""

    def __init__(self) -> None:
        super().__init__()
        self.model_pt_path: str | None = None
        self.map_location: str | None = None
        self.target = 0
        self.profiler_args: dict[str, Any] = {}

    def initialize(self, context: Context) -> None:
        fill_missing_attributes(self)
        refuse_unsupported(context)
        super().initialize(context)
        self.map_location = self.device.type
        self.mapping = load_label_mapping(self.model_dir / "index_to_name.json")
        self.initialized = True

    def load_model(self, context: Context) -> Any:
        """TorchServe's dispatch: an eager model file + state_dict, else a clear error for each serialized form."""
        model_info = (context.manifest or {}).get("model") or {}
        model_dir = str(context.system_properties["model_dir"])
        serialized = model_info.get("serializedFile")
        self.model_pt_path = os.path.join(model_dir, serialized) if serialized else None
        model_file = model_info.get("modelFile") or ""
        if model_file:
            model = self._load_pickled_model(model_dir, model_file, self.model_pt_path)
            return self.convert_model(model).to(self.device).eval()
        if self.model_pt_path is None:
            raise RuntimeError(f"model {context.model_name!r} has neither a model file nor a serialized file: "
                               f"{EAGER_ADVICE}")  # fmt: skip
        if self.model_pt_path.endswith(".onnx"):
            raise RuntimeError(f"{serialized}: ONNX models (and TensorRT through ONNX Runtime) cannot run on serve, "
                               f"which has no ONNX runtime: {EAGER_ADVICE}")  # fmt: skip
        if self.model_pt_path.endswith(".so"):
            return self._load_torch_export_aot_compile(self.model_pt_path)
        return self._load_torchscript_model(self.model_pt_path)

    def _load_pickled_model(self, model_dir: str, model_file: str, model_pt_path: str | None) -> Any:
        """The model file's one nn.Module class, built with no arguments, with the state_dict loaded strictly."""
        if not os.path.isfile(os.path.join(model_dir, model_file)):
            raise RuntimeError(f"Missing the model.py file: {model_file!r} is not in the model directory {model_dir}")
        module = import_user_file(model_dir, model_file, torch_compat=True)
        classes = list_classes_from_module(module, serve.nn.Module)
        if len(classes) != 1:
            names = ", ".join(c.__name__ for c in classes) or "none"
            raise ValueError(f"Expected only one class as model definition: {model_file!r} defines {len(classes)} "
                             f"nn.Module classes ({names}); move the others to another file")  # fmt: skip
        model = classes[0]()
        if model_pt_path:
            model.load_state_dict(find_state_dict(serve.load(model_pt_path, map_location="cpu")))
        return model

    def _load_torchscript_model(self, model_pt_path: str) -> Any:
        raise RuntimeError(
            f"{Path(model_pt_path).name}: a TorchScript model (a serialized file with no --model-file) cannot run on "
            f"serve, which does not run TorchScript programs: {EAGER_ADVICE}"
        )

    def _load_torch_export_aot_compile(self, model_so_path: str) -> Any:
        raise RuntimeError(
            f"{Path(model_so_path).name}: a torch.export AOT-compiled library cannot run on serve (it is compiled "
            f"against libtorch): {EAGER_ADVICE}"
        )

    def _use_torch_export_aot_compile(self) -> bool:
        export = ((self.model_yaml_config or {}).get("pt2") or {}).get("export")
        return isinstance(export, dict) and export.get("aot_compile") is True

    def _infer_with_profiler(self, data: Any) -> Any:
        raise RuntimeError(_PROFILER_MESSAGE)

    @timed
    def preprocess(self, data: list[Any]) -> Any:
        return super().preprocess(data)

    @timed
    def inference(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        return super().inference(data, *args, **kwargs)

    @timed
    def postprocess(self, data: Any) -> list[Any]:
        return super().postprocess(data)


_PROFILER_MESSAGE = ("ENABLE_TORCH_PROFILER: the PyTorch profiler cannot profile serve's runtime; unset it and use "
                     "model-config handler: {profile: true} for per-stage times (ts_handler_* metrics)")  # fmt: skip


def refuse_unsupported(context: Context) -> None:
    """RuntimeError for a TorchServe feature that needs torch itself (see the module docstring)."""
    pt2 = _asks_for_pt2(context.model_yaml_config or {})
    if pt2 == "export":
        raise RuntimeError(
            "model-config pt2 export (torch.export AOT compilation) is not available on serve: remove the pt2 "
            "section and " + EAGER_ADVICE
        )
    if pt2 == "compile":
        logger.warning("model-config pt2 compile (torch.compile) is ignored: serve runs the eager model through its "
                       "own inference plan, made at load (model-config optimize: true, the default)")  # fmt: skip
    # TorchServe's own switches, set by its users in the environment (ipex_enable in config.properties)
    if os.environ.get("TS_IPEX_ENABLE", "false").lower() == "true":
        raise RuntimeError(
            "TS_IPEX_ENABLE=true asks for Intel Extension for PyTorch, which cannot run on serve: unset it; serve "
            "uses the CPU's AVX512-BF16 itself with model-config dtype: bfloat16"
        )
    if os.environ.get("ENABLE_TORCH_PROFILER"):
        raise RuntimeError(_PROFILER_MESSAGE)


def _asks_for_pt2(config: dict[str, Any]) -> str | None:
    """What the model-config's `pt2` turns on: "compile" (torch.compile: a backend name, compile options,
    `compile: {enable: true, ...}`), "export" (`export: {aot_compile: true}`), or None."""
    if "pt2" not in config:
        return None
    pt2 = config["pt2"]
    if not isinstance(pt2, dict):
        return "compile" if pt2 is not None and pt2 is not False else None
    if "compile" in pt2:
        return "compile" if (pt2["compile"] or {}).get("enable") is True else None
    if "export" in pt2:
        return "export" if (pt2["export"] or {}).get("aot_compile") is True else None
    return "compile" if pt2 else None


def fill_missing_attributes(handler: Any) -> None:
    """Set each attribute the handler's built-in bases' `__init__` would set and that is missing (a subclass
    `__init__` that skipped `super().__init__()`)."""
    base = next(c for c in type(handler).__mro__ if c.__module__.startswith(("serve.compat.ts.", "handlers.")))
    fresh = object.__new__(type(handler))
    base.__init__(fresh)  # type: ignore[misc]  # the built-in base's own __init__, on a bare instance
    for name, value in vars(fresh).items():
        if name not in vars(handler):
            setattr(handler, name, value)
