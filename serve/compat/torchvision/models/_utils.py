"""`torchvision.models._utils` on serve: the helpers model files import from it (IntermediateLayerGetter, the
constructor-argument checks, _make_divisible), each defined once elsewhere and re-exported here."""

from __future__ import annotations

from typing import Any

from serve.compat.torchvision.models._api import overwrite_named_param as _ovewrite_named_param
from serve.zoo.mobilenet import _make_divisible
from serve.zoo.segmentation import IntermediateLayerGetter

__all__ = ["IntermediateLayerGetter", "_make_divisible", "_ovewrite_named_param", "_ovewrite_value_param"]


def _ovewrite_value_param(param: str, actual: Any, expected: Any) -> Any:
    """`expected`, refusing a different value the caller gave (torchvision's spelling of the name kept)."""
    if actual is not None and actual != expected:
        raise ValueError(f"The parameter '{param}' expected value {expected} but got {actual} instead.")
    return expected
