"""serve.compat.torchvision.transforms against the real torchvision (same inputs, PIL and tensor paths)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

import serve
from serve.compat.torchvision import transforms as T
from serve.compat.torchvision.transforms import functional as F
from serve.compat.torchvision.transforms import v2
from tests.torchvision_reference import needs_torchvision, reference_torchvision

pytestmark = needs_torchvision


def _tv():
    import torchvision.transforms.v2  # noqa: F401  (a submodule torchvision does not import itself)

    return reference_torchvision()


def _torch(t: serve.Tensor):
    import torch

    return torch.from_numpy(np.ascontiguousarray(t.numpy()))


def _serve(arr: np.ndarray) -> serve.Tensor:
    return serve.from_numpy(np.ascontiguousarray(arr))


def _image(h: int = 37, w: int = 53, mode: str = "RGB", seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    arr = rng.integers(0, 256, (h, w, channels), dtype=np.uint8)
    # smooth part + noise, so resampling differences show on both edges and texture
    arr[: h // 2] = np.linspace(0, 255, w, dtype=np.uint8)[None, :, None]
    return Image.fromarray(arr[:, :, 0] if channels == 1 else arr, mode)


def _uint8(shape: tuple[int, ...], seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _mode(name: str):
    return getattr(_tv().transforms.InterpolationMode, name)


@pytest.mark.parametrize("api", ["v1", "v2"])
@pytest.mark.parametrize("mode", ["BILINEAR", "BICUBIC"])
@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("size", [(20, 31), (64, 90), (37, 100), 25])
def test_tensor_resize_matches_torchvision(api: str, mode: str, antialias: bool, size) -> None:
    # v1 resizes uint8 in float, v2 with PyTorch's native uint8 kernels (rounded between passes): each its own
    tv_api = _tv().transforms.functional if api == "v1" else _tv().transforms.v2.functional
    ours = F if api == "v1" else v2.functional
    arr = _uint8((2, 3, 37, 53))
    got = ours.resize(_serve(arr), size, getattr(T.InterpolationMode, mode), antialias=antialias).numpy()
    want = tv_api.resize(_torch(_serve(arr)), size, _mode(mode), antialias=antialias).numpy()
    assert got.dtype == want.dtype == np.uint8 and got.shape == want.shape
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1  # within 1/255
    floats = arr.astype(np.float32) / 255
    got_f = ours.resize(_serve(floats), size, getattr(T.InterpolationMode, mode), antialias=antialias).numpy()
    want_f = tv_api.resize(_torch(_serve(floats)), size, _mode(mode), antialias=antialias).numpy()
    np.testing.assert_allclose(got_f, want_f, atol=2e-5)  # PyTorch computes source positions in float32


@pytest.mark.parametrize("mode", ["NEAREST", "NEAREST_EXACT"])
def test_tensor_nearest_resize_is_exact(mode: str) -> None:
    arr = _uint8((3, 37, 53))
    for size in [(20, 31), (80, 101), 17]:
        got = F.resize(_serve(arr), size, getattr(T.InterpolationMode, mode)).numpy()
        want = _tv().transforms.functional.resize(_torch(_serve(arr)), size, _mode(mode)).numpy()
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["BILINEAR", "BICUBIC", "NEAREST", "LANCZOS"])
def test_pil_resize_is_torchvisions_pil_path(mode: str) -> None:
    img = _image()
    for size, max_size in [(24, None), ((30, 70), None), (30, 40), (100, None)]:
        got = F.resize(img, size, getattr(T.InterpolationMode, mode), max_size=max_size)
        want = _tv().transforms.functional.resize(img, size, _mode(mode), max_size=max_size)
        assert got.size == want.size
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_tensor_and_pil_bilinear_resize_agree_within_one_level() -> None:
    img = _image(120, 90)
    pil = np.asarray(F.resize(img, 50)).transpose(2, 0, 1)
    tensor = F.resize(F.pil_to_tensor(img), 50).numpy()
    assert np.abs(pil.astype(int) - tensor.astype(int)).max() <= 1


def test_resize_output_size_rules() -> None:
    t = _serve(_uint8((3, 40, 60)))
    assert tuple(F.resize(t, 20).shape) == (3, 20, 30)
    assert tuple(F.resize(t, [20]).shape) == (3, 20, 30)
    assert tuple(F.resize(t, 20, max_size=25).shape) == (3, 16, 25)
    assert tuple(v2.Resize(None, max_size=30)(t).shape) == (3, 20, 30)
    with pytest.raises(ValueError, match="max_size"):
        F.resize(t, (20, 20), max_size=30)
    with pytest.raises(ValueError, match="only supported for tensor"):
        F.resize(_image(), 10, T.InterpolationMode.NEAREST_EXACT)


@pytest.mark.parametrize("size", [(20, 30), (37, 53), (40, 60), (21, 22), 15])
def test_center_crop_tensor_and_pil(size) -> None:
    tvf = _tv().transforms.functional
    arr = _uint8((3, 37, 53))
    np.testing.assert_array_equal(F.center_crop(_serve(arr), size).numpy(), tvf.center_crop(_torch(_serve(arr)), size))
    img = _image()
    np.testing.assert_array_equal(np.asarray(F.center_crop(img, size)), np.asarray(tvf.center_crop(img, size)))


def test_crop_flip_and_resized_crop() -> None:
    tvf = _tv().transforms.functional
    arr = _uint8((3, 20, 25))
    t, ref = _serve(arr), _torch(_serve(arr))
    np.testing.assert_array_equal(F.crop(t, -3, 5, 10, 30).numpy(), tvf.crop(ref, -3, 5, 10, 30))
    np.testing.assert_array_equal(F.hflip(t).numpy(), tvf.hflip(ref))
    np.testing.assert_array_equal(F.vflip(t).numpy(), tvf.vflip(ref))
    got = F.resized_crop(t, 2, 3, 12, 15, [8, 9]).numpy().astype(int)
    assert np.abs(got - tvf.resized_crop(ref, 2, 3, 12, 15, [8, 9]).numpy().astype(int)).max() <= 1


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric"])
@pytest.mark.parametrize("padding", [2, [1, 3], [1, 2, 3, 4], [3, -1, 2, -2]])
def test_pad_tensor_and_pil(mode: str, padding) -> None:
    tvf = _tv().transforms.functional
    arr = _uint8((3, 9, 11))
    fill = 7 if mode == "constant" else 0
    want = tvf.pad(_torch(_serve(arr)), padding, fill=fill, padding_mode=mode).numpy()
    np.testing.assert_array_equal(F.pad(_serve(arr), padding, fill=fill, padding_mode=mode).numpy(), want)
    if isinstance(padding, list) and min(padding) < 0:
        return  # torchvision's PIL path refuses negative padding for non-constant modes
    img = _image(9, 11)
    np.testing.assert_array_equal(
        np.asarray(F.pad(img, padding, fill, mode)), np.asarray(tvf.pad(img, padding, fill, mode))
    )


def test_pad_fill_per_channel_on_pil() -> None:
    img = _image(5, 6)
    want = _tv().transforms.functional.pad(img, [1, 2], fill=(10, 20, 30))
    np.testing.assert_array_equal(np.asarray(F.pad(img, [1, 2], fill=(10, 20, 30))), np.asarray(want))


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L"])
def test_to_tensor_and_pil_to_tensor(mode: str) -> None:
    tvf = _tv().transforms.functional
    img = _image(mode=mode)
    got = F.to_tensor(img)
    assert got.dtype == serve.float32
    np.testing.assert_allclose(got.numpy(), tvf.to_tensor(img).numpy(), atol=1e-7)
    np.testing.assert_array_equal(F.pil_to_tensor(img).numpy(), tvf.pil_to_tensor(img).numpy())
    hwc = np.array(img)  # writable, so torch does not warn
    np.testing.assert_allclose(F.to_tensor(hwc).numpy(), tvf.to_tensor(hwc).numpy(), atol=1e-7)


def test_to_pil_image_round_trips_like_torchvision() -> None:
    tvf = _tv().transforms.functional
    floats = np.random.default_rng(2).random((3, 8, 9), dtype=np.float32)
    for arr in (floats, _uint8((3, 8, 9)), _uint8((1, 8, 9)), floats[:1]):
        got, want = F.to_pil_image(_serve(arr)), tvf.to_pil_image(_torch(_serve(arr)))
        assert got.mode == want.mode
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    hwc = _uint8((8, 9, 4))
    assert F.to_pil_image(hwc).mode == tvf.to_pil_image(hwc).mode == "RGBA"


def test_normalize_matches_torchvision() -> None:
    tvf = _tv().transforms.functional
    x = np.random.default_rng(3).random((2, 3, 6, 7), dtype=np.float32)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    got = F.normalize(_serve(x), mean, std)
    assert got.dtype == serve.float32
    np.testing.assert_allclose(got.numpy(), tvf.normalize(_torch(_serve(x)), mean, std).numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(TypeError, match="float tensor"):
        F.normalize(_serve(_uint8((3, 4, 4))), mean, std)


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        ("uint8", "float32"),
        ("float32", "uint8"),
        ("uint8", "int32"),
        ("int32", "uint8"),
        ("float64", "float32"),
        ("int16", "float64"),
        ("float32", "int16"),
    ],
)
def test_convert_image_dtype_and_to_dtype(src: str, dst: str) -> None:
    import torch

    tv = _tv()
    rng = np.random.default_rng(4)
    arr = rng.random((3, 5, 6)).astype(src) if src.startswith("float") else rng.integers(0, 120, (3, 5, 6)).astype(src)
    got = F.convert_image_dtype(_serve(arr), getattr(serve, dst)).numpy()
    want = tv.transforms.functional.convert_image_dtype(_torch(_serve(arr)), getattr(torch, dst)).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)
    got_v2 = v2.ToDtype(getattr(serve, dst), scale=True)(_serve(arr)).numpy()
    want_v2 = tv.transforms.v2.ToDtype(getattr(torch, dst), scale=True)(_torch(_serve(arr))).numpy()
    np.testing.assert_allclose(got_v2, want_v2, rtol=1e-6)


def test_convert_image_dtype_refuses_unsafe_casts() -> None:
    with pytest.raises(RuntimeError, match="cannot be performed safely"):
        F.convert_image_dtype(_serve(np.zeros((1, 2, 2), np.float32)), serve.int64)


@pytest.mark.parametrize("channels", [1, 3])
def test_grayscale_tensor_and_pil(channels: int) -> None:
    tvf = _tv().transforms.functional
    arr = _uint8((3, 7, 8))
    want = tvf.rgb_to_grayscale(_torch(_serve(arr)), channels).numpy()
    np.testing.assert_array_equal(F.rgb_to_grayscale(_serve(arr), channels).numpy(), want)
    img = _image()
    np.testing.assert_array_equal(np.asarray(T.Grayscale(channels)(img)), np.asarray(tvf.to_grayscale(img, channels)))


def _imagenet(tv_t):
    return [tv_t.Resize(256), tv_t.CenterCrop(224)]


def test_imagenet_pipelines_v1_and_v2_match_torchvision() -> None:
    import torch

    tv = _tv()
    img = _image(300, 400)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    ours = T.Compose([*_imagenet(T), T.ToTensor(), T.Normalize(mean, std)])(img)
    ref = tv.transforms.Compose(
        [*_imagenet(tv.transforms), tv.transforms.ToTensor(), tv.transforms.Normalize(mean, std)]
    )
    np.testing.assert_allclose(ours.numpy(), ref(img).numpy(), atol=1e-6)
    tv2 = tv.transforms.v2
    ours2 = v2.Compose([v2.ToImage(), *_imagenet(v2), v2.ToDtype(serve.float32, scale=True), v2.Normalize(mean, std)])
    ref2 = tv2.Compose(
        [tv2.ToImage(), *_imagenet(tv2), tv2.ToDtype(torch.float32, scale=True), tv2.Normalize(mean, std)]
    )
    got, want = ours2(img).numpy(), ref2(img).numpy()
    assert got.shape == want.shape == (3, 224, 224)
    # tensor-path resize of uint8: within one level of 255 after normalisation by std
    assert np.abs(got - want).max() <= 1 / 255 / min(std) + 1e-6


def test_v2_passes_other_inputs_through() -> None:
    t = _serve(_uint8((3, 10, 12)))
    out, target = v2.Resize(5)(t, {"label": 3})
    assert tuple(out.shape) == (3, 5, 6) and target == {"label": 3}
    assert tuple(v2.ToImage()(np.zeros((4, 5, 3), np.uint8)).shape) == (3, 4, 5)
    assert v2.ToPureTensor()(t) is t


def test_random_transforms_give_valid_shapes() -> None:
    img = _image(60, 80)
    for _ in range(5):
        assert T.RandomResizedCrop(32)(img).size == (32, 32)
        assert tuple(T.RandomResizedCrop((20, 24))(F.pil_to_tensor(img)).shape) == (3, 20, 24)
    t = _serve(_uint8((3, 4, 5)))
    np.testing.assert_array_equal(T.RandomHorizontalFlip(p=1.0)(t).numpy(), t.numpy()[..., ::-1])
    assert T.RandomHorizontalFlip(p=0.0)(t) is t
    assert T.Lambda(lambda x: x + 1)(1) == 2


def test_errors_name_the_problem() -> None:
    with pytest.raises(TypeError, match="PIL image or a serve tensor"):
        F.resize([1, 2, 3], 4)
    with pytest.raises(TypeError, match="interpolation should be"):
        T.Resize(3, interpolation="sideways")
    with pytest.raises(ValueError, match="padding"):
        T.Pad([1, 2, 3])
