"""`torchvision` on serve's runtime: `models`, `transforms`, `io` and `ops`, each a subpackage here.

The worker's import hook maps `torchvision.X` to `serve.compat.torchvision.X` while torch compatibility is on.
Subpackages are imported lazily, on first attribute access (`torchvision.models`), so importing this package
costs nothing and a subpackage that fails to import fails alone, with its own error, instead of taking every
other part of `torchvision` down with it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__version__ = "0.28.0+serve"  # the torchvision release whose names and state_dict keys this package follows

_SUBMODULES = ("models", "transforms", "io", "ops")


def __getattr__(name: str) -> ModuleType:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(
        f"torchvision.{name} is not provided by serve's torchvision (available: models, transforms, io, ops)"
    )


def __dir__() -> list[str]:
    return sorted([*globals(), *_SUBMODULES])
