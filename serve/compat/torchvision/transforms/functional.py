"""`torchvision.transforms.functional` on serve: each function takes a PIL image or a serve tensor image
(..., C, H, W) and returns the same kind, as torchvision's.

PIL images go through Pillow exactly as torchvision's PIL path does (its resize IS Pillow's resize), sharing the
built-in handlers' implementations (`handlers.transforms`) where they exist. Tensor images are computed in numpy:
resizing with PyTorch's interpolation weights (`_resample.py`, antialiased by default as torchvision's), the rest
by index arithmetic with torchvision's rounding. Tensors returned are new serve Tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

import serve
from handlers import transforms as _handler_transforms
from serve.compat.torchvision.transforms._images import (
    array_of,
    check_image,
    image_hw,
    is_pil,
    is_tensor,
    pair,
    resized_size,
    tensor_of,
)
from serve.compat.torchvision.transforms._mode import InterpolationMode, interpolation_mode, pil_filter
from serve.compat.torchvision.transforms._resample import resize_array

__all__ = [
    "InterpolationMode",
    "center_crop",
    "convert_image_dtype",
    "crop",
    "get_dimensions",
    "get_image_size",
    "hflip",
    "normalize",
    "pad",
    "pil_to_tensor",
    "resize",
    "resized_crop",
    "rgb_to_grayscale",
    "to_grayscale",
    "to_pil_image",
    "to_tensor",
    "vflip",
]

_PAD_MODES = {"constant": "constant", "edge": "edge", "reflect": "reflect", "symmetric": "symmetric"}


def get_dimensions(img: Any) -> list[int]:
    """[channels, height, width]."""
    if is_pil(img):
        return [len(img.getbands()), img.height, img.width]
    arr = array_of(img, "get_dimensions")
    return [1 if arr.ndim == 2 else int(arr.shape[-3]), int(arr.shape[-2]), int(arr.shape[-1])]


def get_image_size(img: Any) -> list[int]:
    """[width, height] (torchvision's v1 order)."""
    height, width = image_hw(img)
    return [width, height]


def resize(img: Any, size: Any, interpolation: Any = InterpolationMode.BILINEAR, max_size: int | None = None,
           antialias: bool | None = True) -> Any:  # fmt: skip
    """Resize to `size`: an int matches the shorter side (aspect kept), (h, w) is exact. PIL images always use
    Pillow's antialiased filters; tensors honour `antialias` for bilinear/bicubic, as torchvision."""
    return resize_image(img, size, interpolation, max_size, antialias, uint8_passes=False)


def resize_image(img: Any, size: Any, interpolation: Any, max_size: int | None, antialias: bool | None,
                 uint8_passes: bool) -> Any:  # fmt: skip
    """`resize`, with the choice of how uint8 tensors are computed (v1: in float; v2: two uint8 passes)."""
    check_image(img, "resize")
    mode = interpolation_mode(interpolation)
    height, width = image_hw(img)
    new_h, new_w = resized_size(height, width, size, max_size)
    if is_pil(img):
        return img.resize((new_w, new_h), pil_filter(mode))
    arr = array_of(img, "resize")
    if (new_h, new_w) == (height, width):
        return tensor_of(arr.copy())
    return tensor_of(resize_array(arr, new_h, new_w, mode.value, bool(antialias), uint8_passes))


def crop(img: Any, top: int, left: int, height: int, width: int) -> Any:
    """The box at (top, left) of size (height, width); parts outside the image are zeros."""
    check_image(img, "crop")
    if is_pil(img):
        return img.crop((left, top, left + width, top + height))
    arr = array_of(img, "crop")
    h, w = arr.shape[-2:]
    out = np.zeros((*arr.shape[:-2], height, width), dtype=arr.dtype)
    y0, y1, x0, x1 = max(top, 0), min(top + height, h), max(left, 0), min(left + width, w)
    if y1 > y0 and x1 > x0:
        out[..., y0 - top : y1 - top, x0 - left : x1 - left] = arr[..., y0:y1, x0:x1]
    return tensor_of(out)


def center_crop(img: Any, output_size: int | Sequence[int]) -> Any:
    """The centre (h, w) box at round((H - h) / 2), round((W - w) / 2); a crop larger than the image pads it with
    zeros first (the smaller half of an odd difference on the top/left), as torchvision."""
    check_image(img, "center_crop")
    if is_pil(img):
        return _handler_transforms.CenterCrop(pair(output_size, "center_crop"))(img)
    crop_h, crop_w = pair(output_size, "center_crop")
    height, width = image_hw(img)
    if crop_h > height or crop_w > width:
        left, top = max(crop_w - width, 0) // 2, max(crop_h - height, 0) // 2
        right, bottom = (max(crop_w - width, 0) + 1) // 2, (max(crop_h - height, 0) + 1) // 2
        img = pad(img, [left, top, right, bottom])
        height, width = image_hw(img)
    return crop(img, round((height - crop_h) / 2.0), round((width - crop_w) / 2.0), crop_h, crop_w)


def resized_crop(img: Any, top: int, left: int, height: int, width: int, size: Any,
                 interpolation: Any = InterpolationMode.BILINEAR, antialias: bool | None = True,
                 uint8_passes: bool = False) -> Any:  # fmt: skip
    return resize_image(crop(img, top, left, height, width), size, interpolation, None, antialias, uint8_passes)


def hflip(img: Any) -> Any:
    check_image(img, "hflip")
    if is_pil(img):
        return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return tensor_of(array_of(img, "hflip")[..., ::-1])


def vflip(img: Any) -> Any:
    check_image(img, "vflip")
    if is_pil(img):
        return img.transpose(Image.Transpose.FLIP_TOP_BOTTOM)
    return tensor_of(array_of(img, "vflip")[..., ::-1, :])


def _padding(padding: Any) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) from an int, [all], [left/right, top/bottom] or [left, top, right, bottom]."""
    if isinstance(padding, int) and not isinstance(padding, bool):
        return padding, padding, padding, padding
    if isinstance(padding, Sequence) and len(padding) in (1, 2, 4):
        values = [int(p) for p in padding]
        if len(values) == 1:
            return values[0], values[0], values[0], values[0]
        if len(values) == 2:
            return values[0], values[1], values[0], values[1]
        return values[0], values[1], values[2], values[3]
    raise ValueError(f"padding must be an int or a sequence of 1, 2 or 4 ints, got {padding!r}")


def pad(img: Any, padding: Any, fill: Any = 0, padding_mode: str = "constant") -> Any:
    """Pad the borders by (left, top, right, bottom); negative padding crops. Modes: constant (with `fill`),
    edge, reflect (the edge pixel not repeated), symmetric (repeated)."""
    check_image(img, "pad")
    if padding_mode not in _PAD_MODES:
        raise ValueError(f"padding_mode should be constant, edge, reflect or symmetric, got {padding_mode!r}")
    left, top, right, bottom = _padding(padding)
    arr = np.asarray(img) if is_pil(img) else array_of(img, "pad")
    spatial = (0, 1) if is_pil(img) else (arr.ndim - 2, arr.ndim - 1)
    widths = [(0, 0)] * arr.ndim
    widths[spatial[0]], widths[spatial[1]] = (max(top, 0), max(bottom, 0)), (max(left, 0), max(right, 0))
    kwargs: dict[str, Any] = {}
    if padding_mode == "constant":
        kwargs["constant_values"] = 0 if fill is None else _fill_value(fill, arr, is_pil(img))
    if padding_mode == "constant" and not np.isscalar(kwargs["constant_values"]):
        out = _pad_per_channel(arr, widths, kwargs["constant_values"])
    else:
        out = np.pad(arr, widths, mode=_PAD_MODES[padding_mode], **kwargs)  # type: ignore[call-overload]
    crop_slices = [slice(None)] * arr.ndim
    for axis, (lo, hi) in zip(spatial, ((top, bottom), (left, right))):
        crop_slices[axis] = slice(-lo if lo < 0 else 0, out.shape[axis] + hi if hi < 0 else out.shape[axis])
    out = out[tuple(crop_slices)]
    if is_tensor(img):
        return tensor_of(out)
    result = Image.fromarray(np.ascontiguousarray(out), mode=None if img.mode != "P" else "P")
    if img.mode == "P" and img.getpalette() is not None:
        result.putpalette(img.getpalette())
    return result


def _fill_value(fill: Any, arr: np.ndarray, pil: bool) -> Any:
    if isinstance(fill, Sequence) and not isinstance(fill, str):
        values = [float(f) for f in fill]
        if len(values) == 1:
            return values[0]
        channels = (arr.shape[2] if arr.ndim == 3 else 1) if pil else arr.shape[-3]
        if len(values) != channels:
            raise ValueError(f"fill has {len(values)} values but the image has {channels} channels")
        return np.asarray(values, dtype=arr.dtype)
    return fill


def _pad_per_channel(arr: np.ndarray, widths: list[tuple[int, int]], fill: np.ndarray) -> np.ndarray:
    out = np.pad(arr, widths, mode="constant")
    mask = np.pad(np.zeros(arr.shape, dtype=bool), widths, mode="constant", constant_values=True)
    channel_axis = arr.ndim - 1 if arr.ndim == 3 and arr.shape[-1] == fill.size else arr.ndim - 3
    shape = [1] * arr.ndim
    shape[channel_axis] = fill.size
    return np.where(mask, np.broadcast_to(fill.reshape(shape), out.shape), out)


def to_tensor(pic: Any) -> serve.Tensor:
    """A PIL image or an (H, W[, C]) ndarray -> (C, H, W); uint8 is scaled to float32 in [0, 1]."""
    if is_pil(pic):
        return tensor_of(_handler_transforms.ToTensor()(pic))
    if not isinstance(pic, np.ndarray):
        raise TypeError(f"to_tensor takes a PIL image or a numpy array (H, W[, C]), got {type(pic).__name__}")
    if pic.ndim not in (2, 3):
        raise ValueError(f"to_tensor takes an (H, W) or (H, W, C) array, got {pic.ndim} dims")
    chw = (pic[:, :, None] if pic.ndim == 2 else pic).transpose(2, 0, 1)  # (C, H, W)
    return tensor_of(chw.astype(np.float32) / np.float32(255) if chw.dtype == np.uint8 else chw)


def pil_to_tensor(pic: Any) -> serve.Tensor:
    """A PIL image -> (C, H, W) of its own dtype (uint8 for RGB/L), unscaled."""
    if not is_pil(pic):
        raise TypeError(f"pil_to_tensor takes a PIL image, got {type(pic).__name__}")
    arr = np.array(pic)
    arr = arr.reshape(pic.height, pic.width, len(pic.getbands()))  # (H, W, C)
    return tensor_of(arr.transpose(2, 0, 1))


_MODES_BY_CHANNELS = {2: "LA", 3: "RGB", 4: "RGBA"}
_SINGLE_CHANNEL_MODES = {np.dtype(np.uint8): "L", np.dtype(np.int16): "I;16", np.dtype(np.int32): "I",
                         np.dtype(np.float32): "F"}  # fmt: skip


def to_pil_image(pic: Any, mode: str | None = None) -> Image.Image:
    """A tensor (C, H, W) or ndarray (H, W, C) -> PIL image; float tensors are scaled by 255 and truncated to uint8
    unless mode is "F", as torchvision."""
    if is_tensor(pic):
        arr = array_of(pic, "to_pil_image")
        arr = arr[None] if arr.ndim == 2 else arr
        if arr.ndim != 3:
            raise ValueError(f"to_pil_image takes a (C, H, W) tensor, got shape {arr.shape}")
        if arr.dtype.kind == "f" and mode != "F":
            arr = (arr * 255).astype(np.uint8)
        arr = arr.transpose(1, 2, 0)  # (H, W, C)
    elif isinstance(pic, np.ndarray):
        arr = pic[:, :, None] if pic.ndim == 2 else pic
        if arr.ndim != 3:
            raise ValueError(f"to_pil_image takes an (H, W, C) array, got shape {pic.shape}")
    else:
        raise TypeError(f"to_pil_image takes a serve tensor or a numpy array, got {type(pic).__name__}")
    channels = arr.shape[2]
    if channels == 1:
        arr = arr[:, :, 0]
        expected = _SINGLE_CHANNEL_MODES.get(arr.dtype)
        if expected is None:
            raise TypeError(f"an image of one channel must be uint8, int16, int32 or float32, got {arr.dtype}")
    elif channels in _MODES_BY_CHANNELS:
        if arr.dtype != np.uint8:
            raise TypeError(f"an image of {channels} channels must be uint8, got {arr.dtype}")
        expected = _MODES_BY_CHANNELS[channels]
    else:
        raise ValueError(f"to_pil_image takes 1 to 4 channels, got {channels}")
    arr = np.ascontiguousarray(arr)
    if mode is None or mode == expected:
        return Image.fromarray(arr)
    if channels == 1 and arr.dtype == np.uint8 and mode in ("L", "P", "1"):
        return Image.fromarray(arr).convert(mode) if mode == "1" else Image.frombytes(mode, arr.shape[::-1], arr)
    if channels >= 3 and mode in ("RGB", "YCbCr", "HSV", "RGBA", "CMYK", "RGBX") and len(mode) in (3, 4, 5):
        return Image.frombytes(mode, (arr.shape[1], arr.shape[0]), arr.tobytes())
    raise ValueError(f"mode {mode!r} does not fit an image of {channels} channels of {arr.dtype}")


def _max_value(dt: np.dtype) -> float:
    return 1.0 if dt.kind == "f" else float(np.iinfo(dt).max)


def convert_image_numpy(arr: np.ndarray, target: np.dtype) -> np.ndarray:
    """torchvision's dtype conversion with value scaling: float in [0, 1] <-> integers in [0, max]."""
    if arr.dtype == target:
        return arr
    if arr.dtype.kind == "f":
        if target.kind == "f":
            return arr.astype(target)
        if (arr.dtype == np.float32 and target in (np.int32, np.int64)) or (
            arr.dtype == np.float64 and target == np.int64
        ):
            raise RuntimeError(f"The cast from {arr.dtype} to {target} cannot be performed safely.")
        return (arr * (_max_value(target) + 1.0 - 1e-3)).astype(target)
    if target.kind == "f":
        return (arr.astype(target) / target.type(_max_value(arr.dtype))).astype(target)
    in_max, out_max = int(_max_value(arr.dtype)), int(_max_value(target))
    if in_max > out_max:
        return (arr // ((in_max + 1) // (out_max + 1))).astype(target)
    return arr.astype(target) * target.type((out_max + 1) // (in_max + 1))


def convert_image_dtype(image: Any, dtype: Any = serve.float32) -> serve.Tensor:
    """Convert a tensor image's dtype, rescaling values: float images are in [0, 1], integer ones in [0, max]."""
    if not is_tensor(image):
        raise TypeError(f"convert_image_dtype takes a serve tensor, got {type(image).__name__}")
    return tensor_of(convert_image_numpy(image.detach().cpu().numpy(), dtype.np))


def normalize(tensor: Any, mean: Sequence[float], std: Sequence[float], inplace: bool = False) -> serve.Tensor:
    """(x - mean) / std per channel of a float tensor image (..., C, H, W)."""
    arr = array_of(tensor, "normalize", min_dims=3)
    if arr.dtype.kind != "f":
        raise TypeError(f"Input tensor should be a float tensor. Got {serve.from_numpy(arr[:0]).dtype}.")
    out = _handler_transforms.Normalize(mean, std)(arr)
    return tensor_of(out.astype(arr.dtype, copy=False))


def rgb_to_grayscale(img: Any, num_output_channels: int = 1) -> Any:
    """ITU-R 601-2 luma (0.2989 R + 0.587 G + 0.114 B), replicated to 3 channels when asked; integer images are
    truncated, as torchvision's tensor path (PIL images use Pillow's "L" conversion)."""
    check_image(img, "rgb_to_grayscale")
    if num_output_channels not in (1, 3):
        raise ValueError(f"num_output_channels should be either 1 or 3, got {num_output_channels}")
    if is_pil(img):
        return _handler_transforms.Grayscale(num_output_channels)(img)
    arr = array_of(img, "rgb_to_grayscale", min_dims=3)
    if arr.shape[-3] not in (1, 3):
        raise TypeError(f"rgb_to_grayscale takes 1 or 3 channels, got {arr.shape[-3]}")
    if arr.shape[-3] == 3:
        r, g, b = (arr[..., c, :, :].astype(np.float32) for c in range(3))
        gray = (0.2989 * r + 0.587 * g + 0.114 * b).astype(arr.dtype)[..., None, :, :]
    else:
        gray = arr
    return tensor_of(np.repeat(gray, num_output_channels, axis=-3))


to_grayscale = rgb_to_grayscale
