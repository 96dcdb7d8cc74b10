"""Torch compatibility: an unmodified PyTorch model file (and handler file) imported on serve's runtime.

Opt in per model with manifest `model.torchCompat: true` (`model-archiver --torch-compat`) or model-config
`torchCompat: true`. While such a file is imported (`with torch_compat(): ...`), these names resolve to serve:

    torch                      -> serve                  (Tensor, tensor, zeros, cat, no_grad, float32, load, ...)
    torch.nn                   -> serve.nn               (Module, Linear, Conv2d, LSTM, Sequential, ...)
    torch.nn.functional        -> serve.nn.functional
    torch.nn.init, torch.nn.parameter, torch.nn.modules, torch.nn.utils -> serve.nn.init, .parameter, .modules, .utils
    torch.autograd, torch.autograd.function -> serve.autograd, serve.autograd.function
    torch.cuda                 -> serve.cuda             (is_available() is False until the CUDA backend is up)

so `import torch`, `import torch.nn as nn`, `import torch.nn.functional as F` and `from torch import nn, Tensor`
work unchanged; the file keeps these objects after the import, so its code runs on serve at request time too
(an `import torch` run later, inside a function at request time, is not redirected: import at the top).

Not covered (a clear ImportError or AttributeError names what is missing): any other `torch.*` module
(torch.jit / TorchScript, torch.fx, torch.compile, torch.distributed, torch.optim, torch.utils.data,
torch.hub, torch.cuda.amp and CUDA streams, torch.backends), torchvision, torchaudio and torchtext (serve.zoo
has ResNet, MobileNetV2 and ViT), and names the serve runtime does not implement. A third-party library the
model file imports (transformers, timm, ...) that itself imports torch would see serve, and fail.

Scope: only during the import. The real torch modules, if any are loaded (tests use torch as the reference), are
taken out of `sys.modules` for the duration and put back afterwards, so nothing else in the process is
affected. The swap is process-wide while it lasts: import model files at load time, not from several threads.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.abc import MetaPathFinder
from types import ModuleType
from typing import Any

ALIASES = {
    "torch": "serve",
    "torch.nn": "serve.nn",
    "torch.nn.functional": "serve.nn.functional",
    "torch.nn.init": "serve.nn.init",
    "torch.nn.parameter": "serve.nn.parameter",
    "torch.nn.modules": "serve.nn.modules",
    "torch.nn.utils": "serve.nn.utils",
    "torch.autograd": "serve.autograd",
    "torch.autograd.function": "serve.autograd.function",
    "torch.cuda": "serve.cuda",
}
HIDDEN_PACKAGES = ("torch", "torchvision", "torchaudio", "torchtext")
_COVERED = ", ".join(ALIASES)

_depth = 0
_proxies: dict[str, ModuleType] = {}


class _Alias(ModuleType):
    """A `torch...` module whose names are the serve module's; a missing name says what is not covered."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"{self.__name__}.{name} is not provided by serve's torch compatibility (covered: {_COVERED}, with the "
            f"names serve implements): port this part of the model file to serve"
        )


class _Refuse(MetaPathFinder):
    """Refuses, with a clear message, any torch module outside ALIASES while the compatibility is on."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if fullname.split(".")[0] in HIDDEN_PACKAGES:
            raise ImportError(
                f"{fullname} is not available under serve's torch compatibility (covered: {_COVERED}): "
                "port this import to serve, or remove it from the model file",
                name=fullname,
            )
        return None


_FINDER = _Refuse()


def torch_compat_enabled(manifest: Mapping[str, Any] | None, model_yaml_config: Mapping[str, Any] | None) -> bool:
    """Whether the manifest (`model.torchCompat`) or the model-config (`torchCompat`) turns the compatibility on."""
    model = (manifest or {}).get("model") or {}
    return _true(model.get("torchCompat")) or _true((model_yaml_config or {}).get("torchCompat"))


@contextmanager
def torch_compat() -> Iterator[None]:
    """While the block runs, `import torch` (and the modules in ALIASES) give serve's; re-entrant."""
    global _depth
    if _depth:
        yield
        return
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if _hidden(name)}
    sys.modules.update(_alias_modules())
    sys.meta_path.insert(0, _FINDER)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        sys.meta_path.remove(_FINDER)
        for name in [n for n in sys.modules if _hidden(n)]:
            del sys.modules[name]
        sys.modules.update(saved)


def _alias_modules() -> dict[str, ModuleType]:
    """One proxy module per alias, made once: serve's namespace copied, children linked as attributes."""
    if _proxies:
        return _proxies
    for alias, target_name in ALIASES.items():
        target = importlib.import_module(target_name)
        proxy = _Alias(alias, target.__doc__)
        proxy.__dict__.update({k: v for k, v in vars(target).items() if not k.startswith("__") or k == "__all__"})
        proxy.__path__ = []  # a package, so `import torch.x` asks the import system (and _Refuse) for torch.x
        _proxies[alias] = proxy
    for alias, module in _proxies.items():
        parent, _, child = alias.rpartition(".")
        if parent:
            setattr(_proxies[parent], child, module)
    return _proxies


def _hidden(module_name: str) -> bool:
    return module_name.split(".")[0] in HIDDEN_PACKAGES


def _true(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")
