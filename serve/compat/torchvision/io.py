"""`torchvision.io` image reading on serve, decoded by Pillow: read_file, decode_image, decode_jpeg, decode_png,
read_image, ImageReadMode, plus encode_jpeg/encode_png/write_file.

torchvision decodes with libjpeg/libpng; Pillow reads the same files to the same pixels for baseline JPEG and PNG
(JPEG decoders may differ by a level or so on some files, as two libjpeg builds do). Results are uint8 serve
tensors of shape (C, H, W), as torchvision's: UNCHANGED keeps the file's channels (1 gray, 2 gray+alpha, 3 RGB,
4 RGBA or CMYK; palette images become RGB, or RGBA when they carry transparency, as libpng expands them), the
other modes convert. 16-bit PNGs decode to int32 values 0..65535 (serve has no uint16 dtype; torchvision's is
uint16). Unreadable bytes raise RuntimeError naming the supported formats, which a handler answers as a 4xx.
"""

from __future__ import annotations

import io as _io
import os
from enum import Enum
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

import serve

__all__ = ["ImageReadMode", "decode_image", "decode_jpeg", "decode_png", "encode_jpeg", "encode_png", "read_file",
           "read_image", "write_file", "write_jpeg", "write_png"]  # fmt: skip


class ImageReadMode(Enum):
    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4


_MODE_NAMES = {"UNCHANGED": ImageReadMode.UNCHANGED, "GRAY": ImageReadMode.GRAY, "L": ImageReadMode.GRAY,
               "GRAY_ALPHA": ImageReadMode.GRAY_ALPHA, "LA": ImageReadMode.GRAY_ALPHA, "RGB": ImageReadMode.RGB,
               "RGB_ALPHA": ImageReadMode.RGB_ALPHA, "RGBA": ImageReadMode.RGB_ALPHA}  # fmt: skip
_PIL_MODE = {ImageReadMode.GRAY: "L", ImageReadMode.GRAY_ALPHA: "LA", ImageReadMode.RGB: "RGB",
             ImageReadMode.RGB_ALPHA: "RGBA"}  # fmt: skip
_SUPPORTED = "Only jpeg, png, webp and gif are currently supported"


def _read_mode(mode: Any) -> ImageReadMode:
    if isinstance(mode, ImageReadMode):
        return mode
    if isinstance(mode, str) and mode.upper() in _MODE_NAMES:
        return _MODE_NAMES[mode.upper()]
    raise ValueError(f"mode should be an ImageReadMode or one of {sorted(_MODE_NAMES)}, got {mode!r}")


def read_file(path: str | os.PathLike[str]) -> serve.Tensor:
    """The bytes of a file as a 1-D uint8 tensor."""
    with open(path, "rb") as f:
        data = f.read()
    return serve.from_numpy(np.frombuffer(data, dtype=np.uint8).copy())


def write_file(filename: str | os.PathLike[str], data: serve.Tensor) -> None:
    """Write a 1-D uint8 tensor's bytes to a file."""
    with open(filename, "wb") as f:
        f.write(_bytes_of(data, "write_file"))


def _bytes_of(data: Any, name: str) -> bytes:
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    if not isinstance(data, serve.Tensor):
        raise TypeError(f"{name} takes a 1-D uint8 tensor of encoded bytes, got {type(data).__name__}")
    if data.dtype != serve.uint8 or data.ndim != 1:
        raise ValueError(f"{name} takes a 1-D uint8 tensor of encoded bytes, got {data.dtype} of shape "
                         f"{tuple(data.shape)} (read the file with torchvision.io.read_file)")  # fmt: skip
    return data.detach().cpu().numpy().tobytes()


def _open(data: bytes, name: str, formats: tuple[str, ...] | None) -> Image.Image:
    try:
        img = Image.open(_io.BytesIO(data), formats=formats)
        img.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        expected = f"a {'/'.join(formats)} image" if formats else "an image"
        raise RuntimeError(f"{name}: the bytes are not {expected} Pillow can decode ({exc}). {_SUPPORTED}.") from None
    return img


def _to_tensor(img: Image.Image, mode: ImageReadMode, apply_exif_orientation: bool) -> serve.Tensor:
    if apply_exif_orientation:
        img = ImageOps.exif_transpose(img)
    if mode != ImageReadMode.UNCHANGED:
        img = img.convert(_PIL_MODE[mode])
    elif img.mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    elif img.mode in ("1", "PA", "La"):
        img = img.convert({"1": "L", "PA": "RGBA", "La": "LA"}[img.mode])
    elif img.mode not in ("L", "LA", "RGB", "RGBA", "CMYK", "I;16", "I;16B", "I"):
        img = img.convert("RGB")
    arr = np.array(img)
    if arr.dtype != np.uint8:
        arr = arr.astype(np.int32)  # 16-bit PNG: no uint16 dtype in serve
    arr = arr.reshape(img.height, img.width, -1)  # (H, W, C)
    return serve.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))  # (C, H, W)


def _decode(input: Any, mode: Any, apply_exif_orientation: bool, name: str, formats: tuple[str, ...] | None) -> Any:
    read_mode = _read_mode(mode)
    if isinstance(input, list | tuple):
        return [_decode(one, read_mode, apply_exif_orientation, name, formats) for one in input]
    if isinstance(input, str | os.PathLike):
        data = read_file(input).numpy().tobytes()
    else:
        data = _bytes_of(input, name)
    return _to_tensor(_open(data, name, formats), read_mode, apply_exif_orientation)


def decode_image(input: Any, mode: Any = ImageReadMode.UNCHANGED, apply_exif_orientation: bool = False) -> Any:
    """Encoded bytes (a 1-D uint8 tensor) or a path -> a uint8 (C, H, W) tensor, whatever the format."""
    return _decode(input, mode, apply_exif_orientation, "decode_image", None)


def decode_jpeg(input: Any, mode: Any = ImageReadMode.UNCHANGED, device: Any = "cpu",
                apply_exif_orientation: bool = False) -> Any:  # fmt: skip
    """JPEG bytes (or a list of them) -> uint8 (C, H, W); only the CPU decoder exists here."""
    if str(device) != "cpu":
        raise RuntimeError(f"decode_jpeg on {device} needs torchvision's nvJPEG decoder; serve decodes on the CPU")
    return _decode(input, mode, apply_exif_orientation, "decode_jpeg", ("JPEG", "MPO"))


def decode_png(input: Any, mode: Any = ImageReadMode.UNCHANGED, apply_exif_orientation: bool = False) -> Any:
    """PNG bytes -> uint8 (C, H, W) (int32 for 16-bit PNGs)."""
    return _decode(input, mode, apply_exif_orientation, "decode_png", ("PNG",))


def read_image(path: str | os.PathLike[str], mode: Any = ImageReadMode.UNCHANGED,
               apply_exif_orientation: bool = False) -> serve.Tensor:  # fmt: skip
    """decode_image(read_file(path))."""
    return decode_image(read_file(path), mode, apply_exif_orientation)


def _pil_of(image: Any, name: str) -> Image.Image:
    if not isinstance(image, serve.Tensor) or image.dtype != serve.uint8 or image.ndim != 3:
        raise ValueError(f"{name} takes a uint8 (C, H, W) tensor, got {getattr(image, 'dtype', type(image))}")
    arr = np.ascontiguousarray(image.detach().cpu().numpy().transpose(1, 2, 0))  # (H, W, C)
    if arr.shape[2] not in (1, 3):
        raise ValueError(f"{name} takes 1 or 3 channels, got {arr.shape[2]}")
    return Image.fromarray(arr[:, :, 0] if arr.shape[2] == 1 else arr)


def _encoded(img: Image.Image, fmt: str, **options: Any) -> serve.Tensor:
    buf = _io.BytesIO()
    img.save(buf, format=fmt, **options)
    return serve.from_numpy(np.frombuffer(buf.getvalue(), dtype=np.uint8).copy())


def encode_jpeg(input: Any, quality: int = 75) -> Any:
    """uint8 (C, H, W) (or a list) -> JPEG bytes as a 1-D uint8 tensor."""
    if isinstance(input, list | tuple):
        return [encode_jpeg(one, quality) for one in input]
    if not 1 <= quality <= 100:
        raise ValueError(f"Image quality should be a positive number between 1 and 100, got {quality}")
    return _encoded(_pil_of(input, "encode_jpeg"), "JPEG", quality=quality)


def encode_png(input: serve.Tensor, compression_level: int = 6) -> serve.Tensor:
    """uint8 (C, H, W) -> PNG bytes as a 1-D uint8 tensor."""
    if not 0 <= compression_level <= 9:
        raise ValueError(f"Compression level should be between 0 and 9, got {compression_level}")
    return _encoded(_pil_of(input, "encode_png"), "PNG", compress_level=compression_level)


def write_jpeg(input: serve.Tensor, filename: str | os.PathLike[str], quality: int = 75) -> None:
    write_file(filename, encode_jpeg(input, quality))


def write_png(input: serve.Tensor, filename: str | os.PathLike[str], compression_level: int = 6) -> None:
    write_file(filename, encode_png(input, compression_level))
