"""handlers.transforms against its references: Pillow for the geometry (torchvision's PIL path is Pillow calls
with torchvision's size arithmetic, restated here), torch arithmetic for ToTensor and Normalize."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from handlers.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    CenterCrop,
    Compose,
    ConvertMode,
    Grayscale,
    Normalize,
    Resize,
    ToTensor,
    build_image_processing,
)
from tests.helpers import needs_torch, torch
from tests.unit.handlers.vision_helpers import random_image


@pytest.mark.parametrize(
    ("size", "wh", "expected_wh"),
    [
        (20, (40, 30), (26, 20)),  # landscape: height is the shorter side; width int(20 * 40 / 30) = 26
        (20, (30, 40), (20, 26)),  # portrait
        (256, (500, 333), (384, 256)),  # int(256 * 500 / 333) = 384.38 -> 384 (truncated, not rounded)
        (7, (5, 5), (7, 7)),  # upscaling a square
        ((9, 17), (40, 30), (17, 9)),  # (h, w) is exact
        ([12], (40, 30), (16, 12)),  # a one-element sequence means the shorter side, as torchvision
    ],
)
def test_resize_matches_pillow_bilinear(size, wh, expected_wh):
    img = random_image(*wh)
    out = Resize(size)(img)
    assert out.size == expected_wh
    np.testing.assert_array_equal(np.asarray(out), np.asarray(img.resize(expected_wh, Image.Resampling.BILINEAR)))


def test_resize_at_target_size_returns_the_image_unchanged():
    img = random_image(32, 48)
    assert Resize(32)(img) is img


def test_resize_interpolation_is_configurable():
    img = random_image(40, 30)
    out = Resize(10, Image.Resampling.NEAREST)(img)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(img.resize((13, 10), Image.Resampling.NEAREST)))


@pytest.mark.parametrize(
    ("wh", "crop", "top_left"),
    [
        ((10, 8), 4, (2, 3)),  # (8-4)/2 = 2, (10-4)/2 = 3
        ((7, 7), 4, (2, 2)),  # round(1.5) = 2 (Python's round, as torchvision)
        ((9, 9), 4, (2, 2)),  # round(2.5) = 2: half to even
        ((12, 9), (3, 5), (3, 4)),  # (h, w): round(3.0) = 3, round(3.5) = 4
    ],
)
def test_center_crop_offsets(wh, crop, top_left):
    img = random_image(*wh)
    out = CenterCrop(crop)(img)
    h, w = (crop, crop) if isinstance(crop, int) else crop
    top, left = top_left
    np.testing.assert_array_equal(np.asarray(out), np.asarray(img)[top : top + h, left : left + w])


def test_center_crop_larger_than_image_zero_pads_like_torchvision():
    img = random_image(3, 2)
    out = np.asarray(CenterCrop((5, 6))(img))
    # torchvision pads left (6-3)//2 = 1, right 2, top (5-2)//2 = 1, bottom 2
    expected = np.zeros((5, 6, 3), dtype=np.uint8)
    expected[1:3, 1:4] = np.asarray(img)
    np.testing.assert_array_equal(out, expected)


def test_center_crop_pads_one_side_and_crops_the_other():
    img = random_image(10, 2)
    out = np.asarray(CenterCrop(4)(img))
    expected = np.zeros((4, 4, 3), dtype=np.uint8)
    expected[1:3] = np.asarray(img)[:, 3:7]
    np.testing.assert_array_equal(out, expected)


def test_grayscale_is_pillows_luma_and_replicates_to_three_channels():
    img = random_image(6, 5)
    gray = Grayscale()(img)
    assert gray.mode == "L"
    np.testing.assert_array_equal(np.asarray(gray), np.asarray(img.convert("L")))
    rgb = np.asarray(Grayscale(3)(img))
    assert rgb.shape == (5, 6, 3)
    for c in range(3):
        np.testing.assert_array_equal(rgb[..., c], np.asarray(gray))


def test_convert_mode_drops_alpha():
    img = random_image(4, 4, "RGBA")
    out = ConvertMode("RGB")(img)
    assert out.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(out), np.asarray(img)[..., :3])


@needs_torch
@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
def test_to_tensor_matches_torch_arithmetic(mode):
    img = random_image(7, 5, mode)
    out = ToTensor()(img)
    arr = np.asarray(img).reshape(5, 7, -1)
    ref = torch.from_numpy(arr.copy()).permute(2, 0, 1).contiguous().float().div(255)  # torchvision's ToTensor
    assert out.dtype == np.float32 and out.shape == tuple(ref.shape)
    np.testing.assert_array_equal(out, ref.numpy())


def test_to_tensor_unscaled_modes():
    f = Image.fromarray(np.array([[1.5, -2.0]], dtype=np.float32))
    np.testing.assert_array_equal(ToTensor()(f), [[[1.5, -2.0]]])
    i = Image.fromarray(np.array([[70000, 3]], dtype=np.int32))
    out = ToTensor()(i)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [[[70000, 3]]])
    bilevel = Image.fromarray(np.array([[0, 255]], dtype=np.uint8)).convert("1")
    np.testing.assert_array_equal(ToTensor()(bilevel), np.array([[[0.0, 1.0]]], dtype=np.float32))


@needs_torch
def test_normalize_matches_torch_arithmetic():
    x = ToTensor()(random_image(6, 4))
    out = Normalize(IMAGENET_MEAN, IMAGENET_STD)(x)
    t = torch.from_numpy(x.copy())
    mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float32).view(-1, 1, 1)
    std = torch.tensor(IMAGENET_STD, dtype=torch.float32).view(-1, 1, 1)
    ref = t.sub_(mean).div_(std)  # torchvision's F.normalize
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, ref.numpy())


def test_normalize_checks_channels_dtype_and_zero_std():
    x = ToTensor()(random_image(3, 3))
    np.testing.assert_allclose(Normalize([0.5], [0.5])(x), (x - 0.5) / 0.5, rtol=1e-6)
    with pytest.raises(ValueError, match="mean has 2 values but the image has 3 channels"):
        Normalize([0.1, 0.2], [1.0])(x)
    with pytest.raises(ValueError, match="division by zero"):
        Normalize([0.0], [0.0])(x)
    with pytest.raises(TypeError, match="float array"):
        Normalize([0.0], [1.0])(np.zeros((3, 2, 2), dtype=np.uint8))


def test_transforms_before_to_tensor_refuse_arrays():
    with pytest.raises(TypeError, match="apply it before ToTensor"):
        Resize(4)(np.zeros((3, 4, 4), dtype=np.float32))


@pytest.mark.parametrize("bad", [0, -3, (4,), (2, 0), "224", 2.5, True])
def test_bad_sizes_are_refused(bad):
    with pytest.raises(ValueError, match="size must be"):
        CenterCrop(bad)


def test_compose_applies_in_order_and_matches_the_steps_by_hand():
    img = random_image(50, 40)
    pipeline = Compose([Resize(32), CenterCrop(24), ToTensor(), Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    by_hand = Normalize(IMAGENET_MEAN, IMAGENET_STD)(ToTensor()(CenterCrop(24)(Resize(32)(img))))
    np.testing.assert_array_equal(pipeline(img), by_hand)
    assert "Resize(size=32" in repr(pipeline)


def test_build_image_processing_defaults_are_torchserves_image_classifier():
    img = random_image(300, 260, "RGBA")
    out = build_image_processing()(img)
    ref = Normalize(IMAGENET_MEAN, IMAGENET_STD)(ToTensor()(CenterCrop(224)(Resize(256)(img.convert("RGB")))))
    assert out.shape == (3, 224, 224)
    np.testing.assert_array_equal(out, ref)


def test_build_image_processing_grayscale_and_skipped_steps():
    img = random_image(8, 8)
    out = build_image_processing(resize=None, crop=None, mean=None, std=None, grayscale=True)(img)
    np.testing.assert_array_equal(out, ToTensor()(img.convert("L")))
    with pytest.raises(ValueError, match="mean needs 1 value for grayscale images"):
        build_image_processing(mean=IMAGENET_MEAN, std=[0.2], grayscale=True)
    with pytest.raises(ValueError, match="both mean and std"):
        build_image_processing(mean=[0.5], std=None)
