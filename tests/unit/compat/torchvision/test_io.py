"""serve.compat.torchvision.io against Pillow + numpy (torchvision's compiled decoders do not load here), with
torchvision's documented output: uint8 (C, H, W), channels by ImageReadMode."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import serve
from serve.compat.torchvision import io as tvio
from serve.compat.torchvision.io import ImageReadMode


def _pixels(h: int = 13, w: int = 17, channels: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, channels), dtype=np.uint8)


def _encode(img: Image.Image, fmt: str, **options) -> serve.Tensor:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **options)
    return serve.from_numpy(np.frombuffer(buf.getvalue(), dtype=np.uint8).copy())


def _chw(arr: np.ndarray) -> np.ndarray:
    return (arr[:, :, None] if arr.ndim == 2 else arr).transpose(2, 0, 1)


@pytest.mark.parametrize(("pil_mode", "channels"), [("RGB", 3), ("RGBA", 4), ("L", 1), ("LA", 2)])
def test_png_unchanged_keeps_the_files_channels(pil_mode: str, channels: int) -> None:
    pixels = _pixels(channels=channels)
    img = Image.fromarray(pixels[:, :, 0] if channels == 1 else pixels, pil_mode)
    data = _encode(img, "PNG")
    for decode in (tvio.decode_png, tvio.decode_image):
        out = decode(data)
        assert out.dtype == serve.uint8 and tuple(out.shape) == (channels, 13, 17)
        np.testing.assert_array_equal(out.numpy(), _chw(pixels))


@pytest.mark.parametrize(
    ("mode", "pil_mode"),
    [
        (ImageReadMode.GRAY, "L"),
        (ImageReadMode.GRAY_ALPHA, "LA"),
        (ImageReadMode.RGB, "RGB"),
        (ImageReadMode.RGB_ALPHA, "RGBA"),
        ("RGB", "RGB"),
        ("GRAY", "L"),
    ],
)
def test_read_modes_convert_like_pillow(mode, pil_mode: str) -> None:
    img = Image.fromarray(_pixels(channels=4), "RGBA")
    out = tvio.decode_image(_encode(img, "PNG"), mode=mode)
    np.testing.assert_array_equal(out.numpy(), _chw(np.array(img.convert(pil_mode))))


def test_palette_png_expands_to_rgb_or_rgba() -> None:
    img = Image.fromarray(_pixels(), "RGB").quantize(16)
    out = tvio.decode_png(_encode(img, "PNG"))
    np.testing.assert_array_equal(out.numpy(), _chw(np.array(img.convert("RGB"))))
    img.info["transparency"] = 0
    assert tuple(tvio.decode_png(_encode(img, "PNG", transparency=0)).shape) == (4, 13, 17)


def test_jpeg_decodes_as_pillow_does() -> None:
    img = Image.fromarray(_pixels(32, 40), "RGB")
    data = _encode(img, "JPEG", quality=90)
    reference = np.array(Image.open(io.BytesIO(data.numpy().tobytes())))
    out = tvio.decode_jpeg(data)
    assert out.dtype == serve.uint8 and tuple(out.shape) == (3, 32, 40)
    np.testing.assert_array_equal(out.numpy(), _chw(reference))
    gray = tvio.decode_jpeg(data, mode=ImageReadMode.GRAY)
    np.testing.assert_array_equal(
        gray.numpy(), _chw(np.array(Image.open(io.BytesIO(data.numpy().tobytes())).convert("L")))
    )
    batch = tvio.decode_jpeg([data, data])
    assert isinstance(batch, list) and len(batch) == 2


def test_read_file_and_read_image(tmp_path: Path) -> None:
    pixels = _pixels()
    path = tmp_path / "x.png"
    Image.fromarray(pixels).save(path)
    raw = tvio.read_file(str(path))
    assert raw.dtype == serve.uint8 and raw.ndim == 1 and raw.numpy().tobytes() == path.read_bytes()
    np.testing.assert_array_equal(tvio.read_image(str(path)).numpy(), _chw(pixels))
    np.testing.assert_array_equal(tvio.decode_image(str(path), mode="RGB").numpy(), _chw(pixels))


def test_exif_orientation_is_applied_only_when_asked() -> None:
    img = Image.fromarray(_pixels(10, 20), "RGB")
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    data = _encode(img, "JPEG", exif=exif.tobytes())
    assert tuple(tvio.decode_jpeg(data).shape) == (3, 10, 20)
    assert tuple(tvio.decode_jpeg(data, apply_exif_orientation=True).shape) == (3, 20, 10)


def test_sixteen_bit_png_keeps_its_values() -> None:
    values = np.random.default_rng(1).integers(0, 65536, (6, 7)).astype(np.uint16)
    img = Image.fromarray(values)
    out = tvio.decode_png(_encode(img, "PNG"))
    assert tuple(out.shape) == (1, 6, 7)
    np.testing.assert_array_equal(out.numpy()[0], values.astype(np.int32))


def test_bad_input_is_a_clear_error() -> None:
    garbage = serve.from_numpy(np.frombuffer(b"not an image at all", dtype=np.uint8).copy())
    with pytest.raises(RuntimeError, match="Only jpeg, png"):
        tvio.decode_image(garbage)
    jpeg = _encode(Image.fromarray(_pixels()), "JPEG")
    with pytest.raises(RuntimeError, match="PNG"):
        tvio.decode_png(jpeg)
    with pytest.raises(ValueError, match="1-D uint8"):
        tvio.decode_image(serve.zeros(3, 4))
    with pytest.raises(ValueError, match="ImageReadMode"):
        tvio.decode_image(jpeg, mode="sepia")


def test_encode_round_trips(tmp_path: Path) -> None:
    chw = serve.from_numpy(np.ascontiguousarray(_chw(_pixels())))
    np.testing.assert_array_equal(tvio.decode_png(tvio.encode_png(chw)).numpy(), chw.numpy())
    tvio.write_jpeg(chw, str(tmp_path / "y.jpg"), quality=95)
    reference = _encode(Image.fromarray(_pixels()), "JPEG", quality=95)  # Pillow's own encoder, same quality
    assert (tmp_path / "y.jpg").read_bytes() == reference.numpy().tobytes()
