"""`torchvision.transforms.v2.functional` on serve: v1's functional forms under their v2 names, plus `to_image`,
`to_dtype` and `get_size` ([height, width], v2's order)."""

from __future__ import annotations

from typing import Any

import numpy as np

import serve
from serve.compat.torchvision.transforms._images import image_hw, is_pil, is_tensor, tensor_of
from serve.compat.torchvision.transforms._mode import InterpolationMode
from serve.compat.torchvision.transforms.functional import (
    center_crop,
    convert_image_dtype,
    convert_image_numpy,
    crop,
    get_dimensions,
    hflip,
    normalize,
    pad,
    pil_to_tensor,
    resize_image,
    rgb_to_grayscale,
    to_grayscale,
    to_pil_image,
    vflip,
)
from serve.compat.torchvision.transforms.functional import resized_crop as _resized_crop_v1

horizontal_flip, vertical_flip = hflip, vflip

__all__ = [
    "InterpolationMode",
    "center_crop",
    "convert_image_dtype",
    "crop",
    "get_dimensions",
    "get_size",
    "horizontal_flip",
    "normalize",
    "pad",
    "pil_to_tensor",
    "resize",
    "resized_crop",
    "rgb_to_grayscale",
    "to_dtype",
    "to_grayscale",
    "to_image",
    "to_pil_image",
    "vertical_flip",
]


def resize(inpt: Any, size: Any, interpolation: Any = InterpolationMode.BILINEAR, max_size: int | None = None,
           antialias: bool | None = True) -> Any:  # fmt: skip
    """v1's resize, except that uint8 tensors are resized as PyTorch's native uint8 kernels do (see _resample)."""
    return resize_image(inpt, size, interpolation, max_size, antialias, uint8_passes=True)


def resized_crop(inpt: Any, top: int, left: int, height: int, width: int, size: Any,
                 interpolation: Any = InterpolationMode.BILINEAR, antialias: bool | None = True) -> Any:  # fmt: skip
    return _resized_crop_v1(inpt, top, left, height, width, size, interpolation, antialias, uint8_passes=True)


def get_size(inpt: Any) -> list[int]:
    """[height, width]."""
    return list(image_hw(inpt))


def to_image(inpt: Any) -> serve.Tensor:
    """A PIL image, an (H, W[, C]) ndarray or a tensor -> a (C, H, W) tensor image of the same dtype, unscaled."""
    if is_pil(inpt):
        return pil_to_tensor(inpt)
    if isinstance(inpt, np.ndarray):
        arr = inpt[:, :, None] if inpt.ndim == 2 else inpt
        if arr.ndim != 3:
            raise ValueError(f"to_image takes an (H, W) or (H, W, C) array, got shape {inpt.shape}")
        return tensor_of(arr.transpose(2, 0, 1))  # (C, H, W)
    if is_tensor(inpt):
        return inpt.unsqueeze(0) if inpt.ndim == 2 else inpt
    raise TypeError(f"to_image takes a PIL image, a numpy array or a tensor, got {type(inpt).__name__}")


def to_dtype(inpt: Any, dtype: Any = serve.float32, scale: bool = False) -> serve.Tensor:
    """Cast a tensor image; with scale=True values are rescaled between integer [0, max] and float [0, 1]."""
    if not is_tensor(inpt):
        raise TypeError(f"to_dtype takes a tensor (convert PIL images with ToImage first), got {type(inpt).__name__}")
    if not scale:
        return inpt.to(dtype)
    return tensor_of(convert_image_numpy(inpt.detach().cpu().numpy(), dtype.np))
