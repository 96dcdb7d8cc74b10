"""`weights.transforms()`: torchvision's ImageNet evaluation preset (`ImageClassification`), on serve's transforms.

Resize the shorter side to `resize_size` (bilinear by default, antialiased), center-crop `crop_size`, PIL -> uint8
tensor, scale to float in [0, 1], normalize with ImageNet's mean and std: the order and defaults of torchvision's
preset, so a handler calling `weights.transforms()(img)` feeds the model what torchvision would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import serve
from serve.compat.torchvision.transforms import functional as F
from serve.compat.torchvision.transforms._mode import InterpolationMode, interpolation_mode

_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)


class ImageClassification:
    """Callable preset: (PIL image or (..., C, H, W) tensor) -> normalized float tensor (..., 3, crop, crop)."""

    def __init__(
        self,
        *,
        crop_size: int,
        resize_size: int = 256,
        mean: Sequence[float] = _MEAN,
        std: Sequence[float] = _STD,
        interpolation: Any = InterpolationMode.BILINEAR,
        antialias: bool | None = True,
    ) -> None:
        self.crop_size = [crop_size]
        self.resize_size = [resize_size]
        self.mean = list(mean)
        self.std = list(std)
        self.interpolation = interpolation_mode(interpolation)
        self.antialias = antialias

    def __call__(self, img: Any) -> serve.Tensor:
        img = F.resize(img, self.resize_size, interpolation=self.interpolation, antialias=self.antialias)
        img = F.center_crop(img, self.crop_size)
        if not isinstance(img, serve.Tensor):
            img = F.pil_to_tensor(img)
        img = F.convert_image_dtype(img, serve.float32)
        return F.normalize(img, mean=self.mean, std=self.std)

    forward = __call__

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(\n    crop_size={self.crop_size}\n    resize_size={self.resize_size}\n"
            f"    mean={self.mean}\n    std={self.std}\n    interpolation={self.interpolation}\n)"
        )

    def describe(self) -> str:
        return (
            f"PIL images or (C, H, W) / (B, C, H, W) tensors: shorter side resized to {self.resize_size[0]} "
            f"({self.interpolation.value}), center crop {self.crop_size[0]}, scaled to [0, 1], normalized with "
            f"mean {self.mean} and std {self.std}."
        )
