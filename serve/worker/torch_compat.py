"""Torch compatibility: an unmodified PyTorch / TorchServe model file and handler imported on serve's runtime.

On by default for an archive whose model file or handler file imports `torch`, `torchvision` or `ts` (found with
`ast`, serve/archive/torch_imports.py); an explicit manifest `model.torchCompat` (`model-archiver --torch-compat`
or `--no-torch-compat`) or model-config `torchCompat: true|false` wins over the detection. While such a file is
imported (`with torch_compat(): ...`), these names resolve to serve:

    torch                      -> serve (Tensor, tensor, zeros, cat, no_grad, float32, load, diff, meshgrid, ...)
                                  plus the thin names of serve.compat.torch (_assert, jit, fx, _C, hub, utils,
                                  compiler, library, LongTensor, UntypedStorage, ...)
    torch.nn, torch.nn.functional, torch.nn.init, torch.nn.parameter, torch.nn.modules, torch.nn.utils,
    torch.autograd, torch.autograd.function, torch.cuda -> the serve modules of the same names (ALIASES), plus
                                  the names of serve.compat.torch's module of that name where there is one
                                  (torch.nn.init.sparse_, torch.nn.Conv3d, torch.cuda.CUDAGraph, ...)
    torch.X.Y (any other)      -> serve's module of that name under an alias (torch.nn.modules.conv ->
                                  serve.nn.modules.conv), else serve.compat.torch.X.Y (torch.jit, torch.fx,
                                  torch.utils.data, torch.hub, torch.nn.modules.utils, ...)
    torchvision, torchvision.X.Y -> serve.compat.torchvision, serve.compat.torchvision.X.Y
    ts, ts.X.Y                 -> serve.compat.ts, serve.compat.ts.X.Y

so `import torch.nn as nn`, `from torchvision import models` and `from ts.torch_handler.base_handler import
BaseHandler` work unchanged. The torchvision and ts names are the serve.compat modules themselves (same objects,
`__name__` is serve's); the torch modules are proxies holding serve's names, whose missing names raise an
AttributeError naming what is covered. A torch/torchvision/ts module that serve.compat does not have gives an
ImportError naming it and what is covered.

Probing behaves like a torch install without the optional packages, because libraries decide what to import by
probing (transformers: `importlib.util.find_spec("torch")`, then the distribution's version or `torch.__version__`):
every proxy has a real ModuleSpec, `torch.__version__` is the torch release whose API serve follows
(serve.compat.torch.version), and `find_spec("torchaudio")` / `find_spec("torchtext")` return None (importing them
is a ModuleNotFoundError), as where they are not installed.

Scope. In the worker process of a torch-compat archive, `install_torch_compat()` turns it on for the process's
whole life (serve/worker/process.py, before the handler loads): transformers imports its modeling files inside
`from_pretrained`, TorchServe's vgg_16 handler `importlib.import_module`s its model file in `initialize`, and a
handler may import at request time; all of them get serve's. In-process loads (`load_from_archive`, tests, where
torch is the reference) use `with torch_compat():` around the handler's import and `initialize` only: the real
torch / torchvision / ts modules, if any are loaded, are taken out of `sys.modules` for the duration and put back
afterwards. The swap is process-wide while it lasts: import model files at load time, not from several threads.
A library imported outside the scope keeps the torch it saw then.

The worker never imports serve.compat (it sits above the worker in the layering): modules are found by name with
importlib, at import time.

Scope: only during the import. The real torch / torchvision / ts modules, if any are loaded (tests use torch as
the reference), are taken out of `sys.modules` for the duration and put back afterwards, so nothing else in the
process is affected. The swap is process-wide while it lasts: import model files at load time, not from several
threads.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any

from serve.archive.torch_imports import compat_enabled

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
PREFIXES = {"torch": "serve.compat.torch", "torchvision": "serve.compat.torchvision", "ts": "serve.compat.ts"}
HIDDEN_PACKAGES = ("torch", "torchvision", "torchaudio", "torchtext", "ts")
ABSENT_PACKAGES = ("torchaudio", "torchtext")  # as if not installed: find_spec gives None, import fails
_COVERED = ", ".join(ALIASES) + "; torch.* from serve.compat.torch, torchvision.* and ts.* from serve.compat"

_depth = 0
_for_life = False
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


class _Same(Loader):
    """Gives the serve.compat module itself for an alias name; its own `__spec__` is kept."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.spec = module.__spec__

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # the import system set the alias spec on it: put serve's back


class _Finder(MetaPathFinder):
    """Maps `torch.*` (outside ALIASES), `torchvision.*` and `ts.*` onto serve.compat; refuses what is not there."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> ModuleSpec | None:
        root = fullname.split(".")[0]
        if root not in HIDDEN_PACKAGES:
            return None
        module = _compat_module(fullname)
        if module is None:
            raise ImportError(
                f"{fullname} is not available under serve's torch compatibility (covered: {_COVERED}): "
                "port this import to serve, or remove it from the model file",
                name=fullname,
            )
        if fullname in ALIASES:  # torch.X proxies already in sys.modules; not reached
            return None
        return ModuleSpec(fullname, _Same(module), is_package=hasattr(module, "__path__"))


_FINDER = _Finder()


def torch_compat_enabled(
    manifest: Mapping[str, Any] | None, model_yaml_config: Mapping[str, Any] | None, model_dir: str | Path | None = None
) -> bool:
    """Explicit model-config `torchCompat` or manifest `model.torchCompat` (true/false) wins (model-config first);
    otherwise on when the manifest's model file or handler file in `model_dir` imports torch, torchvision or ts."""
    return compat_enabled(manifest, model_yaml_config, model_dir)


def install_torch_compat() -> None:
    """From now on, for the rest of the process, `torch` / `torchvision` / `ts` are serve's: a worker process of a
    torch-compat archive calls it before loading the handler. Idempotent; not undone."""
    global _for_life
    if _for_life:
        return
    _enter()
    _for_life = True


@contextmanager
def torch_compat() -> Iterator[None]:
    """While the block runs, `import torch` / `torchvision` / `ts` (and their submodules) give serve's; re-entrant,
    and a no-op inside install_torch_compat()."""
    global _depth
    if _depth or _for_life:
        yield
        return
    saved = _enter()
    try:
        yield
    finally:
        _depth -= 1
        sys.meta_path.remove(_FINDER)
        for name in [n for n in sys.modules if _hidden(n)]:
            del sys.modules[name]
        sys.modules.update(saved)


def _enter() -> dict[str, ModuleType]:
    """Hide the real modules (returned, to put back), map the aliases and start the finder."""
    global _depth
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if _hidden(name)}
    sys.modules.update(_alias_modules())
    sys.modules.update(dict.fromkeys(ABSENT_PACKAGES))  # type: ignore[arg-type]  # None: "not installed"
    sys.meta_path.insert(0, _FINDER)
    _depth += 1
    return saved


def _compat_module(fullname: str) -> ModuleType | None:
    """The module for `fullname`, or None: under an alias, serve's own submodule of the same name first
    (torch.nn.modules.conv -> serve.nn.modules.conv); then serve.compat's (torch.X -> serve.compat.torch.X, ...)."""
    root, _, rest = fullname.partition(".")
    parent = next((a for a in sorted(ALIASES, key=len, reverse=True) if fullname.startswith(a + ".")), None)
    if parent is not None:
        found = _existing(ALIASES[parent] + fullname[len(parent) :])
        if found is not None:
            return found
    return _existing(PREFIXES[root] + ("." + rest if rest else "")) if root in PREFIXES else None


def _existing(target: str) -> ModuleType | None:
    """The module named `target`, imported, or None when there is no such module."""
    if target in sys.modules:
        return sys.modules[target]
    try:
        spec = importlib.util.find_spec(target)
    except ModuleNotFoundError:  # a parent package is missing
        return None
    return None if spec is None else importlib.import_module(target)


def _alias_modules() -> dict[str, ModuleType]:
    """One proxy module per alias, made once: serve's namespace copied, children linked as attributes; `torch`
    also gets serve.compat.torch's names (torch._assert, torch.jit, ...)."""
    if _proxies:
        return _proxies
    serve_file = importlib.import_module("serve").__file__
    for alias, target_name in ALIASES.items():
        target = importlib.import_module(target_name)
        proxy = _Alias(alias, target.__doc__)
        proxy.__dict__.update({k: v for k, v in vars(target).items() if not k.startswith("__") or k == "__all__"})
        proxy.__path__ = []  # a package, so `import torch.x` asks the import system (and _Finder) for torch.x
        # a real spec and file, as an installed package has: find_spec("torch") and version probes read them
        origin = getattr(target, "__file__", None) or serve_file
        proxy.__spec__ = ModuleSpec(alias, None, origin=origin, is_package=True)
        proxy.__spec__.submodule_search_locations = []
        proxy.__file__ = origin
        _proxies[alias] = proxy
    for alias, aliased in _proxies.items():  # serve.compat.torch.X's names join torch.X (torch.nn.init.sparse_, ...)
        extra = _existing(PREFIXES["torch"] + alias[len("torch") :])
        if extra is not None:
            aliased.__dict__.update({k: v for k, v in vars(extra).items() if not k.startswith("__")})
    _proxies["torch"].__dict__["__version__"] = _proxies["torch"].version.__version__
    for alias, module in _proxies.items():
        parent, _, child = alias.rpartition(".")
        if parent:
            setattr(_proxies[parent], child, module)
    return _proxies


def _hidden(module_name: str) -> bool:
    return module_name.split(".")[0] in HIDDEN_PACKAGES
