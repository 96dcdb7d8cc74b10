"""What the transforms share: telling PIL images from serve tensors, moving tensors to numpy and back, sizes.

A tensor image is a serve Tensor of shape (..., C, H, W), as torchvision's. Transforms compute on the numpy array
behind it and return a new serve Tensor; images are inputs, so no autograd graph is kept through them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

import serve


def is_pil(img: Any) -> bool:
    return isinstance(img, Image.Image)


def is_tensor(img: Any) -> bool:
    return isinstance(img, serve.Tensor)


def array_of(img: Any, name: str, min_dims: int = 2) -> np.ndarray:
    """The numpy array of a tensor image, checked to have at least `min_dims` dims."""
    if not is_tensor(img):
        raise TypeError(f"{name} takes a PIL image or a serve tensor image (..., C, H, W), got {type(img).__name__}")
    arr = img.detach().cpu().numpy()
    if arr.ndim < min_dims:
        raise ValueError(f"{name} expects a tensor image of shape (..., C, H, W), got shape {tuple(arr.shape)}")
    return arr


def tensor_of(arr: np.ndarray) -> serve.Tensor:
    return serve.from_numpy(np.ascontiguousarray(arr))


def check_image(img: Any, name: str) -> None:
    if not (is_pil(img) or is_tensor(img)):
        raise TypeError(f"{name} takes a PIL image or a serve tensor image (..., C, H, W), got {type(img).__name__}")


def image_hw(img: Any) -> tuple[int, int]:
    """(height, width) of a PIL image or tensor image."""
    if is_pil(img):
        return img.height, img.width
    shape = array_of(img, "get_size").shape
    return int(shape[-2]), int(shape[-1])


def pair(size: int | Sequence[int], name: str) -> tuple[int, int]:
    """An int (or a 1-sequence) means a square; a 2-sequence is (height, width)."""
    if isinstance(size, Sequence) and len(size) == 1:
        size = size[0]
    if isinstance(size, int | np.integer) and not isinstance(size, bool):
        return int(size), int(size)
    if isinstance(size, Sequence) and len(size) == 2:
        return int(size[0]), int(size[1])
    raise ValueError(f"{name} size must be an int or a (height, width) sequence, got {size!r}")


def resized_size(height: int, width: int, size: Any, max_size: int | None) -> tuple[int, int]:
    """(height, width) after torchvision's resize: an int (or [int]) matches the shorter side keeping the aspect
    ratio (the longer side is `int(size * long / short)`), capped so the longer side is at most `max_size`; a pair
    is exact (max_size is then an error); None with max_size fits the longer side to max_size."""
    if isinstance(size, Sequence) and len(size) == 2:
        if max_size is not None:
            raise ValueError(
                "max_size should only be passed if size specifies the length of the smaller edge, "
                f"i.e. size should be an int or a sequence of length 1; got size={list(size)}"
            )
        return int(size[0]), int(size[1])
    short, long = min(height, width), max(height, width)
    if size is None:
        if max_size is None:
            raise ValueError("resize needs size, or size=None together with max_size")
        new_short, new_long = int(max_size * short / long), max_size
    else:
        requested = pair(size, "resize")[0]
        new_short, new_long = requested, int(requested * long / short)
        if max_size is not None:
            if max_size <= requested:
                raise ValueError(f"max_size = {max_size} must be strictly greater than the requested size {requested}")
            if new_long > max_size:
                new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_long, new_short) if width <= height else (new_short, new_long)
