"""`torchvision.transforms.v2` on serve: the v1 transforms with v2's call convention, plus ToImage, ToDtype and
ToPureTensor.

A v2 transform takes one input or several (`t(img, target)`, a tuple, a dict): it transforms the first image in
the structure (a PIL image or a tensor; for ToImage also a numpy array) and passes everything else through
unchanged, which is what v2 does with plain inputs. torchvision's TVTensor types (Image, BoundingBoxes, Mask) are
not modelled: a bounding box or mask given beside the image is returned as it came, not resized with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import serve
from serve.compat.torchvision.transforms import transforms as _v1
from serve.compat.torchvision.transforms._images import is_pil, is_tensor
from serve.compat.torchvision.transforms._mode import InterpolationMode
from serve.compat.torchvision.transforms.v2 import functional
from serve.compat.torchvision.transforms.v2.functional import to_dtype, to_image

__all__ = [
    "CenterCrop",
    "Compose",
    "ConvertImageDtype",
    "Grayscale",
    "InterpolationMode",
    "Lambda",
    "Normalize",
    "PILToTensor",
    "Pad",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "RandomVerticalFlip",
    "Resize",
    "ToDtype",
    "ToImage",
    "ToPILImage",
    "ToPureTensor",
    "ToTensor",
    "functional",
]


def _is_image(x: Any, arrays: bool) -> bool:
    return is_pil(x) or is_tensor(x) or (arrays and isinstance(x, np.ndarray))


def _apply_first(sample: Any, fn: Callable[[Any], Any], arrays: bool, done: list[bool]) -> Any:
    """`sample` with its first image replaced by fn(image); containers are rebuilt, other leaves kept."""
    if not done[0] and _is_image(sample, arrays):
        done[0] = True
        return fn(sample)
    if isinstance(sample, tuple | list):
        return type(sample)(_apply_first(s, fn, arrays, done) for s in sample)
    if isinstance(sample, dict):
        return {k: _apply_first(v, fn, arrays, done) for k, v in sample.items()}
    return sample


class _V2:
    """v2's call convention over a v1 transform's single-image `__call__`."""

    _takes_arrays = False

    def __call__(self, *inputs: Any) -> Any:
        sample = inputs[0] if len(inputs) == 1 else inputs
        return _apply_first(sample, super().__call__, self._takes_arrays, [False])  # type: ignore[misc]


class Compose(_v1.Compose):
    def __call__(self, *inputs: Any) -> Any:
        sample = inputs[0] if len(inputs) == 1 else inputs
        for t in self.transforms:
            sample = t(sample)
        return sample


class Resize(_V2, _v1.Resize):
    def forward(self, img: Any) -> Any:
        return functional.resize(img, self.size, self.interpolation, self.max_size, self.antialias)


class CenterCrop(_V2, _v1.CenterCrop):
    pass


class Pad(_V2, _v1.Pad):
    pass


class Grayscale(_V2, _v1.Grayscale):
    pass


class Normalize(_V2, _v1.Normalize):
    pass


class ConvertImageDtype(_V2, _v1.ConvertImageDtype):
    def __init__(self, dtype: Any = serve.float32) -> None:
        super().__init__(dtype)


class Lambda(_v1.Lambda):
    def __init__(self, lambd: Callable[[Any], Any], *types: type) -> None:
        super().__init__(lambd)
        self.types = types or (object,)

    def __call__(self, *inputs: Any) -> Any:
        sample = inputs[0] if len(inputs) == 1 else inputs
        return self.lambd(sample) if isinstance(sample, self.types) else sample


class RandomHorizontalFlip(_V2, _v1.RandomHorizontalFlip):
    pass


class RandomVerticalFlip(_V2, _v1.RandomVerticalFlip):
    pass


class RandomCrop(_V2, _v1.RandomCrop):
    pass


class RandomResizedCrop(_V2, _v1.RandomResizedCrop):
    def forward(self, img: Any) -> Any:
        top, left, h, w = self.get_params(img, self.scale, self.ratio)
        return functional.resized_crop(img, top, left, h, w, list(self.size), self.interpolation, self.antialias)


class ToTensor(_V2, _v1.ToTensor):
    _takes_arrays = True


class PILToTensor(_V2, _v1.PILToTensor):
    pass


class ToPILImage(_V2, _v1.ToPILImage):
    _takes_arrays = True


class ToImage(_V2, _v1.Transform):
    _takes_arrays = True

    def forward(self, inpt: Any) -> Any:
        return to_image(inpt)


class ToPureTensor(_V2, _v1.Transform):
    """Identity here: serve has no TVTensor subclasses to strip."""

    def forward(self, inpt: Any) -> Any:
        return inpt


class ToDtype(_V2, _v1.Transform):
    """Cast tensor images to `dtype` (a dtype, or v2's dict form whose image entry or "others" entry is used)."""

    def __init__(self, dtype: Any, scale: bool = False) -> None:
        if isinstance(dtype, dict):
            images = [v for k, v in dtype.items() if getattr(k, "__name__", k) in ("Image", "Video", "others")]
            dtype = images[0] if images else None
        self.dtype, self.scale = dtype, scale

    def forward(self, inpt: Any) -> Any:
        if self.dtype is None or is_pil(inpt):
            return inpt
        return to_dtype(inpt, self.dtype, self.scale)
