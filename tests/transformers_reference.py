"""The real transformers (a test extra, pinned) as the reference for serve's decoder families and for users'
handlers, importable in the pytest process.

transformers imports torchvision when it is installed, and the torchvision wheel here is a CUDA build whose meta
registrations fail on a CPU-only torch ("operator torchvision::nms does not exist"), which makes every
`from transformers import ...Config` fail. So torchvision is imported first the way tests/torchvision_reference.py
does it (its meta registrations replaced by an empty module), then transformers.

    transformers = reference_transformers()    # None when torch or transformers is not installed
    needs_transformers                         # pytest mark: skip cleanly without them
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from tests.torchvision_reference import reference_torchvision

_cache: list[Any] = []


def reference_transformers() -> Any:
    """The real transformers module, or None when torch/transformers are missing or do not import."""
    if not _cache:
        _cache.append(_import())
    return _cache[0]


def _import() -> Any:
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    reference_torchvision()  # before transformers looks for it
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import transformers
            from transformers import LlamaConfig  # noqa: F401  # the lazy import that fails without the above
    except Exception:  # any failure means "no reference here": the tests skip
        return None
    return transformers


needs_transformers = pytest.mark.skipif(
    reference_transformers() is None, reason="torch and transformers (test extras) are not installed"
)
