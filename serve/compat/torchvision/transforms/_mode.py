"""`InterpolationMode`, torchvision's enum of resampling filters, and its map to Pillow's filters.

torchvision accepts the enum or, for backward compatibility, Pillow's integer constants; both are accepted here.
NEAREST_EXACT exists only for tensors (Pillow has no such filter), as in torchvision.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from PIL import Image


class InterpolationMode(Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


_FROM_PIL_INT = {
    0: InterpolationMode.NEAREST,
    2: InterpolationMode.BILINEAR,
    3: InterpolationMode.BICUBIC,
    4: InterpolationMode.BOX,
    5: InterpolationMode.HAMMING,
    1: InterpolationMode.LANCZOS,
}
_TO_PIL = {
    InterpolationMode.NEAREST: Image.Resampling.NEAREST,
    InterpolationMode.BILINEAR: Image.Resampling.BILINEAR,
    InterpolationMode.BICUBIC: Image.Resampling.BICUBIC,
    InterpolationMode.BOX: Image.Resampling.BOX,
    InterpolationMode.HAMMING: Image.Resampling.HAMMING,
    InterpolationMode.LANCZOS: Image.Resampling.LANCZOS,
}


def interpolation_mode(value: Any) -> InterpolationMode:
    """The enum for an InterpolationMode, a Pillow integer constant, or the mode's name ("bilinear")."""
    if isinstance(value, InterpolationMode):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and int(value) in _FROM_PIL_INT:
        return _FROM_PIL_INT[int(value)]
    if isinstance(value, str):
        try:
            return InterpolationMode(value.lower())
        except ValueError:
            pass
    names = ", ".join(m.name for m in InterpolationMode)
    raise TypeError(
        f"interpolation should be an InterpolationMode ({names}) or a Pillow filter constant, got {value!r}"
    )


def pil_filter(mode: InterpolationMode) -> Image.Resampling:
    if mode not in _TO_PIL:
        raise ValueError(f"interpolation {mode.name} is only supported for tensor images, not for PIL images")
    return _TO_PIL[mode]
