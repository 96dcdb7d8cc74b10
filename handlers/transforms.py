"""Image transforms for handlers: torchvision's PIL-path semantics with Pillow + numpy, no torchvision.

    image_processing = Compose([Resize(256), CenterCrop(224), ToTensor(), Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    chw = image_processing(pil_image)   # np.ndarray float32 of shape (C, H, W)

Each class does what its torchvision namesake does to a PIL image, with the same geometry and rounding:
- `Resize(int)` matches the SHORTER side to `size` and scales the longer one to `int(size * long / short)`;
  `Resize((h, w))` resizes to exactly that. Pillow's resampling (BILINEAR by default, always antialiased,
  as torchvision's PIL path) does the work; an image already at the target size is returned unchanged.
- `CenterCrop(int | (h, w))` crops at `round((H - h) / 2)`, `round((W - w) / 2)` (Python's round, as
  torchvision) and zero-pads first when the crop is larger than the image, as torchvision does.
- `Grayscale(n)` is Pillow's "L" conversion (ITU-R 601-2 luma), replicated to 3 channels when `n == 3`.
- `ToTensor()` turns an image (H, W, C) of uint8 into (C, H, W) float32 divided by 255; modes "I", "I;16"
  and "F" keep their values unscaled (int32, int16, float32), and mode "1" becomes 0.0/1.0, as torchvision.
- `Normalize(mean, std)` computes `(x - mean) / std` per channel in the array's float dtype.
`ConvertMode(mode)` (Pillow's `convert`, no torchvision namesake) and `build_image_processing(...)` (the
pipeline the vision handlers configure, also used by examples/digits/train.py so training sees the same
tensors as serving) are ours.
The one difference: the "tensor" that ToTensor returns and Normalize takes is a numpy array, not a torch
Tensor; the vision handler stacks the arrays of a batch and hands them to the model as one `serve.Tensor`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from PIL import Image

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# Pillow modes that ToTensor keeps unscaled, and the numpy dtype each one becomes (torchvision's table on a
# little-endian machine); every other mode is read as uint8 and scaled.
_UNSCALED_MODES = {"I": np.int32, "I;16": np.int16, "F": np.float32}


def _pair(size: int | Sequence[int], name: str) -> tuple[int, int]:
    """An int means a square; a sequence is (height, width)."""
    if isinstance(size, int) and not isinstance(size, bool):
        values = (size, size)
    elif isinstance(size, Sequence) and len(size) == 2 and all(isinstance(s, int) for s in size):
        values = (int(size[0]), int(size[1]))
    else:
        raise ValueError(f"{name} size must be an int or a (height, width) pair of ints, got {size!r}")
    if min(values) <= 0:
        raise ValueError(f"{name} size must be positive, got {size!r}")
    return values


def _require_image(img: Any, name: str) -> Image.Image:
    if not isinstance(img, Image.Image):
        raise TypeError(f"{name} takes a PIL image (apply it before ToTensor), got {type(img).__name__}")
    return img


class Compose:
    """Apply transforms in order, as torchvision.transforms.Compose."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, img: Any) -> Any:
        for t in self.transforms:
            img = t(img)
        return img

    def __repr__(self) -> str:
        inner = "".join(f"\n    {t!r}" for t in self.transforms)
        return f"Compose({inner}\n)"


class Resize:
    """Resize a PIL image: an int matches the shorter side (aspect kept), a (h, w) pair is exact."""

    def __init__(self, size: int | Sequence[int], interpolation: Image.Resampling = Image.Resampling.BILINEAR) -> None:
        if isinstance(size, Sequence) and len(size) == 1:
            size = size[0]
        self.size: int | tuple[int, int] = size if isinstance(size, int) else _pair(size, "Resize")
        _pair(self.size, "Resize")  # validates an int size too
        self.interpolation = interpolation

    def output_size(self, width: int, height: int) -> tuple[int, int]:
        """(height, width) after resizing, by torchvision's `_compute_resized_output_size`."""
        if not isinstance(self.size, int):
            return self.size
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = self.size, int(self.size * long / short)
        return (new_long, new_short) if width <= height else (new_short, new_long)

    def __call__(self, img: Image.Image) -> Image.Image:
        img = _require_image(img, "Resize")
        height, width = self.output_size(*img.size)
        if (height, width) == (img.height, img.width):
            return img
        return img.resize((width, height), self.interpolation)

    def __repr__(self) -> str:
        return f"Resize(size={self.size}, interpolation={self.interpolation.name.lower()})"


class CenterCrop:
    """Crop the centre of a PIL image to (h, w), zero-padding first when the image is smaller."""

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = _pair(size, "CenterCrop")

    def __call__(self, img: Image.Image) -> Image.Image:
        img = _require_image(img, "CenterCrop")
        crop_h, crop_w = self.size
        if crop_w > img.width or crop_h > img.height:
            img = self._pad(img, crop_h, crop_w)
            if img.size == (crop_w, crop_h):
                return img
        top = round((img.height - crop_h) / 2.0)
        left = round((img.width - crop_w) / 2.0)
        return img.crop((left, top, left + crop_w, top + crop_h))

    @staticmethod
    def _pad(img: Image.Image, crop_h: int, crop_w: int) -> Image.Image:
        # torchvision's split: the left/top pad gets the smaller half of an odd difference
        pad_left = (crop_w - img.width) // 2 if crop_w > img.width else 0
        pad_top = (crop_h - img.height) // 2 if crop_h > img.height else 0
        pad_right = (crop_w - img.width + 1) // 2 if crop_w > img.width else 0
        pad_bottom = (crop_h - img.height + 1) // 2 if crop_h > img.height else 0
        canvas = Image.new(img.mode, (img.width + pad_left + pad_right, img.height + pad_top + pad_bottom))
        canvas.paste(img, (pad_left, pad_top))
        return canvas

    def __repr__(self) -> str:
        return f"CenterCrop(size={self.size})"


class Grayscale:
    """Convert a PIL image to grayscale ("L"); with `num_output_channels=3` the gray is replicated to RGB."""

    def __init__(self, num_output_channels: int = 1) -> None:
        if num_output_channels not in (1, 3):
            raise ValueError(f"num_output_channels must be 1 or 3, got {num_output_channels!r}")
        self.num_output_channels = num_output_channels

    def __call__(self, img: Image.Image) -> Image.Image:
        gray = _require_image(img, "Grayscale").convert("L")
        if self.num_output_channels == 1:
            return gray
        return Image.merge("RGB", (gray, gray, gray))

    def __repr__(self) -> str:
        return f"Grayscale(num_output_channels={self.num_output_channels})"


class ConvertMode:
    """Pillow's `Image.convert(mode)`: the vision handlers' first step, so that a PNG's alpha channel or a
    palette image reaches the model as the 3 (or 1) channels it was trained on, not 4 or 1 channels."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def __call__(self, img: Image.Image) -> Image.Image:
        img = _require_image(img, "ConvertMode")
        return img if img.mode == self.mode else img.convert(self.mode)

    def __repr__(self) -> str:
        return f"ConvertMode({self.mode!r})"


class ToTensor:
    """PIL image (H, W, C) -> numpy (C, H, W); uint8 images are scaled to float32 in [0, 1]."""

    def __call__(self, img: Image.Image) -> np.ndarray:
        img = _require_image(img, "ToTensor")
        if img.mode in _UNSCALED_MODES:
            arr = np.asarray(img, dtype=_UNSCALED_MODES[img.mode])
        elif img.mode == "1":
            arr = np.asarray(img, dtype=np.uint8) * np.uint8(255)
        else:
            arr = np.asarray(img, dtype=np.uint8)
        arr = arr.reshape(img.height, img.width, len(img.getbands()))  # (H, W, C)
        chw = np.ascontiguousarray(arr.transpose(2, 0, 1))  # (C, H, W)
        if chw.dtype == np.uint8:
            return chw.astype(np.float32) / np.float32(255)
        return chw

    def __repr__(self) -> str:
        return "ToTensor()"


class Normalize:
    """(x - mean) / std per channel of a (C, H, W) float array; one value is broadcast over all channels."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        if not self.mean or not self.std:
            raise ValueError(f"Normalize needs at least one mean and one std value, got mean={mean!r} std={std!r}")

    def __call__(self, arr: np.ndarray) -> np.ndarray:
        if not isinstance(arr, np.ndarray) or arr.dtype.kind != "f":
            raise TypeError(f"Normalize takes a float array from ToTensor, got {getattr(arr, 'dtype', type(arr))}")
        if arr.ndim < 3:
            raise ValueError(f"Normalize expects a (..., C, H, W) array, got shape {arr.shape}")
        channels = arr.shape[-3]
        for name, values in (("mean", self.mean), ("std", self.std)):
            if len(values) not in (1, channels):
                raise ValueError(f"Normalize {name} has {len(values)} values but the image has {channels} channels")
        mean = np.asarray(self.mean, dtype=arr.dtype).reshape(-1, 1, 1)
        std = np.asarray(self.std, dtype=arr.dtype).reshape(-1, 1, 1)
        if (std == 0).any():
            raise ValueError(f"std evaluated to zero after conversion to {arr.dtype}, leading to division by zero")
        return (arr - mean) / std

    def __repr__(self) -> str:
        return f"Normalize(mean={list(self.mean)}, std={list(self.std)})"


def build_image_processing(
    resize: int | Sequence[int] | None = 256,
    crop: int | Sequence[int] | None = 224,
    mean: Sequence[float] | None = IMAGENET_MEAN,
    std: Sequence[float] | None = IMAGENET_STD,
    grayscale: bool = False,
) -> Compose:
    """Mode conversion ("L" when grayscale, else "RGB"), Resize, CenterCrop, ToTensor, Normalize.

    The defaults are TorchServe's image_classifier pipeline; None skips a step (mean and std go together).
    """
    if (mean is None) != (std is None):
        raise ValueError(f"give both mean and std or neither, got mean={mean!r} std={std!r}")
    steps: list[Callable[[Any], Any]] = [Grayscale(1) if grayscale else ConvertMode("RGB")]
    if resize is not None:
        steps.append(Resize(resize))
    if crop is not None:
        steps.append(CenterCrop(crop))
    steps.append(ToTensor())
    if mean is not None and std is not None:
        allowed = "1 value for grayscale" if grayscale else "1 or 3 values for RGB"
        for name, values in (("mean", mean), ("std", std)):
            if len(values) not in ((1,) if grayscale else (1, 3)):
                raise ValueError(f"{name} needs {allowed} images, got {list(values)}")
        steps.append(Normalize(mean, std))
    return Compose(steps)
