"""The real torchvision (a test extra) as the reference for serve.compat.torchvision, importable without its ops.

The torchvision wheel on our machines is a CUDA build: its compiled ops library does not load on a CPU-only
torch, and its meta registrations then fail at import ("operator torchvision::nms does not exist"). Models,
transforms and weights enums are plain Python, so the reference imports torchvision with the meta registrations
module replaced by an empty one. `torchvision.ops` that need the compiled library (nms, roi_align) stay unusable;
tests of those compare against numpy references instead.

    tv = reference_torchvision()          # None when torch or torchvision is not installed
    needs_torchvision                     # pytest mark: skip cleanly without them
"""

from __future__ import annotations

import sys
import types
import warnings
from typing import Any

import pytest

_cache: list[Any] = []


def reference_torchvision() -> Any:
    """The real torchvision module, or None when torch/torchvision are missing or do not import."""
    if not _cache:
        _cache.append(_import())
    return _cache[0]


def _import() -> Any:
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    name = "torchvision._meta_registrations"
    sys.modules.setdefault(name, types.ModuleType(name))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torchvision
    except Exception:  # any failure means "no reference here": the tests skip
        return None
    return torchvision


needs_torchvision = pytest.mark.skipif(
    reference_torchvision() is None, reason="torch and torchvision (test extras) are not installed"
)
