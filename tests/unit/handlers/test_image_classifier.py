"""image_classifier and the VisionHandler input path: decoding, transforms, top-k against torch, per-request errors."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import serve
import serve.nn.functional as F
from handlers.image_classifier import ImageClassifier
from handlers.transforms import build_image_processing
from handlers.vision_handler import PILLOW_MAX_IMAGE_PIXELS, decode_image, pixel_limit
from serve import nn
from serve.errors import InvalidInput, PredictionException
from tests.helpers import needs_torch, torch
from tests.unit.handlers.vision_helpers import (
    assert_row_error,
    b64,
    encode,
    png_bytes,
    png_header_only,
    random_image,
    run_batch,
    vision_handler,
)

CLASSES = 7
MAPPING = {str(i): f"class{i}" for i in range(CLASSES)} | {"6": ["n0006", "six"]}
FORMATS = ("JPEG", "PNG", "WEBP")


class ToyClassifier(nn.Module):
    def __init__(self, in_channels: int = 3) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 4, 3)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, CLASSES)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return self.fc(serve.flatten(self.pool(F.relu(self.conv(x))), 1))  # (N, classes)


@pytest.fixture
def classifier(tmp_path):
    return vision_handler(ImageClassifier, ToyClassifier(), tmp_path, {"image_size": 16}, MAPPING)


def logits_of(handler, raws: list[bytes]) -> np.ndarray:
    """The model's logits on the images through the same transforms, without the handler's input path."""
    batch = np.stack([build_image_processing(16, 16)(Image.open(io.BytesIO(raw))) for raw in raws])
    with serve.no_grad():
        return handler.model(serve.from_numpy(batch)).numpy()


@needs_torch
def test_top5_labels_and_probabilities_match_torch(classifier):
    handler, context = classifier
    images = [random_image(20, 18, seed=s) for s in range(3)]
    raws = [encode(images[0], "PNG"), encode(images[1], "WEBP", lossless=True), encode(images[2], "JPEG")]
    results = run_batch(handler, context, [{"body": raws[0]}, {"data": raws[1]}, {"body": raws[2]}])
    probs = torch.softmax(torch.from_numpy(logits_of(handler, raws)), dim=1)
    top_p, top_i = torch.topk(probs, 5, dim=1)
    for result, p_row, i_row in zip(results, top_p.tolist(), top_i.tolist()):
        labels = ["six" if i == 6 else f"class{i}" for i in i_row]  # a list-valued entry gives its last element
        assert list(result) == labels
        np.testing.assert_allclose(list(result.values()), p_row, rtol=1e-5, atol=1e-7)
        assert all(isinstance(v, float) for v in result.values())


def test_without_mapping_labels_are_index_strings_and_topk_is_configurable(tmp_path):
    handler, context = vision_handler(ImageClassifier, ToyClassifier(), tmp_path, {"image_size": 16, "topk": 3})
    (result,) = run_batch(handler, context, [{"body": png_bytes(20, 20)}])
    assert len(result) == 3 and all(k.isdigit() for k in result)
    probs = list(result.values())
    assert probs == sorted(probs, reverse=True)
    handler.set_max_result_classes(50)  # more than the model has: every class, no error
    (result,) = run_batch(handler, context, [{"body": png_bytes(20, 20)}])
    assert sorted(result, key=int) == [str(i) for i in range(CLASSES)]
    assert sum(result.values()) == pytest.approx(1.0, abs=1e-5)


def test_defaults_are_torchserves(tmp_path):
    handler, _ = vision_handler(ImageClassifier, ToyClassifier(), tmp_path)
    assert handler.get_max_result_classes() == 5
    assert repr(handler.image_processing) == repr(build_image_processing())  # Resize 256, CenterCrop 224, ImageNet


def test_payload_forms_give_the_same_answer(classifier):
    handler, context = classifier
    raw = png_bytes(20, 17)
    as_list = build_image_processing(16, 16)(Image.open(io.BytesIO(raw))).tolist()
    rows = [
        {"body": raw},
        {"data": bytearray(raw)},
        {"data": b64(raw)},
        {"body": "data:image/png;base64," + b64(raw)},
        {"body": as_list},  # an already-preprocessed (C, H, W) nested list skips the transforms
    ]
    results = run_batch(handler, context, rows)
    for result in results[1:]:
        assert list(result) == list(results[0])
        np.testing.assert_allclose(list(result.values()), list(results[0].values()), rtol=1e-6)


def test_bad_rows_get_their_own_errors_and_the_rest_of_the_batch_succeeds(classifier):
    handler, context = classifier
    good = png_bytes(20, 20, seed=1)
    truncated = png_bytes(64, 64, seed=2)
    truncated = truncated[: len(truncated) * 6 // 10]
    rows = [
        {"body": good},
        {"body": b"this is not an image"},
        {"body": truncated},
        {"body": png_header_only(30000, 30000)},
        {"data": "not base64 at all!"},
        {"body": [[1.0, 2.0], [3.0]]},
        {"body": {"instances": [1, 2]}},
        {"body": b""},
        {"body": np.zeros((3, 8, 8)).tolist()},  # another size than the images': this model (pooling) takes it
        {"data": b64(good)},
    ]
    results = run_batch(handler, context, rows)
    assert_row_error(results[1], context, 1, 400, "could not decode the image", "formats JPEG, PNG, WEBP")
    assert_row_error(results[2], context, 2, 400, "could not decode the PNG image")
    assert_row_error(results[3], context, 3, 413, "900000000 pixels")
    assert_row_error(results[4], context, 4, 400, "not valid base64")
    assert_row_error(results[5], context, 5, 400, "not a rectangular array")
    assert_row_error(results[6], context, 6, 400, "got dict")
    assert_row_error(results[7], context, 7, 400, "no input")
    assert "code" not in results[8] and context.get_response_status(8)[0] == 200
    assert results[3]["type"] == "PredictionException" and results[1]["type"] == "InvalidInput"
    (alone,) = run_batch(handler, context, [{"body": good}])
    assert results[0] == pytest.approx(alone) and results[9] == pytest.approx(alone)


def test_a_batch_where_every_row_is_bad_answers_every_row(classifier):
    handler, context = classifier
    results = run_batch(handler, context, [{"body": b"junk"}, {"data": "%%%"}])
    assert [r["code"] for r in results] == [400, 400]


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_default_pixel_limit_is_pillows_and_refused_before_decoding(classifier):
    handler, context = classifier
    side = int(PILLOW_MAX_IMAGE_PIXELS**0.5) + 1  # just over the limit (Pillow itself would only warn)
    results = run_batch(handler, context, [{"body": png_header_only(side, side)}])
    assert_row_error(results[0], context, 0, 413, f"limit of {PILLOW_MAX_IMAGE_PIXELS} pixels")


def test_an_integer_pixel_limit(tmp_path):
    handler, context = vision_handler(ImageClassifier, ToyClassifier(), tmp_path, {"image_size": 16}, limit=400)
    results = run_batch(handler, context, [{"body": png_bytes(20, 20)}, {"body": png_bytes(21, 20)}])
    assert isinstance(results[0], dict) and "code" not in results[0]
    assert_row_error(results[1], context, 1, 413, "21x20 = 420 pixels", "limit of 400 pixels")


def test_no_pixel_limit_switches_pillows_check_off(tmp_path, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)  # restored after the test
    handler, context = vision_handler(ImageClassifier, ToyClassifier(), tmp_path, {"image_size": 16}, limit=False)
    assert handler.max_image_pixels is None and Image.MAX_IMAGE_PIXELS is None
    (result,) = run_batch(handler, context, [{"body": png_bytes(30, 30)}])
    assert "code" not in result


def test_pixel_limit_setting():
    assert pixel_limit(True) == 89_478_485 == PILLOW_MAX_IMAGE_PIXELS
    assert pixel_limit(False) is None
    assert pixel_limit(1000) == 1000
    with pytest.raises(ValueError, match="positive pixel count"):
        pixel_limit(-5)


@pytest.mark.parametrize("fmt", ["PNG", "WEBP"])
def test_lossless_formats_decode_to_the_original_pixels(fmt):
    img = random_image(9, 7)
    decoded = decode_image(encode(img, fmt, lossless=True), PILLOW_MAX_IMAGE_PIXELS, FORMATS)
    assert decoded.format == fmt
    np.testing.assert_array_equal(np.asarray(decoded), np.asarray(img))


def test_jpeg_decodes_close_to_the_original():
    smooth = Image.fromarray(np.tile(np.linspace(0, 255, 32, dtype=np.uint8), (24, 1)))
    decoded = decode_image(encode(smooth.convert("RGB"), "JPEG", quality=95), None, FORMATS)
    assert decoded.format == "JPEG" and decoded.size == (32, 24)
    assert np.abs(np.asarray(decoded.convert("L"), dtype=float) - np.asarray(smooth)).mean() < 2


def test_formats_outside_the_list_are_refused():
    with pytest.raises(InvalidInput, match="not one of the formats JPEG, PNG, WEBP"):
        decode_image(encode(random_image(4, 4), "BMP"), None, FORMATS)
    with pytest.raises(PredictionException) as err:
        decode_image(png_bytes(10, 10), 99, FORMATS)
    assert err.value.code == 413


def test_alpha_and_palette_pngs_reach_the_model_as_rgb(classifier):
    handler, context = classifier
    rgba = random_image(20, 20, "RGBA", seed=3)
    palette = random_image(20, 20, seed=4).convert("P")
    results = run_batch(handler, context, [{"body": encode(rgba, "PNG")}, {"body": encode(palette, "PNG")}])
    (rgb_result,) = run_batch(handler, context, [{"body": encode(rgba.convert("RGB"), "PNG")}])
    assert results[0] == pytest.approx(rgb_result)
    assert "code" not in results[1]


def test_grayscale_config_feeds_one_channel(tmp_path):
    config = {"image_size": 16, "grayscale": True, "mean": [0.5], "std": [0.25]}
    handler, context = vision_handler(ImageClassifier, ToyClassifier(in_channels=1), tmp_path, config)
    batch = handler.preprocess([{"body": png_bytes(20, 20)}])
    assert tuple(batch.shape) == (1, 1, 16, 16)
    (result,) = run_batch(handler, context, [{"body": png_bytes(20, 20)}])
    assert len(result) == 5


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"topk": 0}, "topk must be a positive integer"),
        ({"mean": [0.1, 0.2], "std": [0.2, 0.2]}, "mean needs 1 or 3 values"),
        ({"grayscale": "yes"}, "grayscale must be true or false"),
        ({"resize": "big"}, "Resize size must be"),
    ],
)
def test_bad_handler_config_fails_initialize(tmp_path, config, message):
    with pytest.raises(ValueError, match=message):
        vision_handler(ImageClassifier, ToyClassifier(), tmp_path, config)


def test_a_model_that_does_not_return_logits_fails_the_batch(tmp_path):
    handler, context = vision_handler(ImageClassifier, nn.Conv2d(3, 2, 1), tmp_path, {"image_size": 8})
    with pytest.raises(RuntimeError, match=r"logits \(batch, classes\), got \[1, 2, 8, 8\]"):
        run_batch(handler, context, [{"body": png_bytes(8, 8)}])


NOT_AN_IMAGE = {
    "one channel": ([[[1.0, 2.0, 3.0]]], "has 1 channels; this model's images have 3"),
    "a batch": (np.zeros((2, 3, 16, 16)).tolist(), "one preprocessed image (C, H, W)"),
    "empty": ([[[]]], "with no empty side"),
}


@pytest.mark.parametrize("bad", sorted(NOT_AN_IMAGE))
@pytest.mark.parametrize("position", [0, 2])
def test_a_nested_list_that_is_not_an_image_fails_alone_at_any_position(classifier, bad, position):
    handler, context = classifier
    raws = [png_bytes(20, 20, seed=s) for s in range(3)]
    rows: list = [{"body": raw} for raw in raws]
    payload, message = NOT_AN_IMAGE[bad]
    rows.insert(position, {"body": payload})
    results = run_batch(handler, context, rows)
    assert_row_error(results[position], context, position, 400, message)
    goods = [r for i, r in enumerate(results) if i != position]
    alone = [run_batch(handler, context, [{"body": raw}])[0] for raw in raws]
    assert goods == [pytest.approx(a) for a in alone]


class FixedSize(ToyClassifier):
    """A classifier that takes 16 x 16 images only (a flatten, not a pooling, before its last layer)."""

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        if tuple(x.shape[2:]) != (16, 16):
            raise ValueError(f"expected (N, 3, 16, 16), got {tuple(x.shape)}")
        return super().forward(x)


@pytest.mark.parametrize("position", [0, 2])
def test_a_nested_list_of_another_size_is_answered_when_the_model_takes_it_else_fails_alone(tmp_path, position):
    small = np.random.default_rng(5).standard_normal((3, 8, 8)).tolist()
    raws = [png_bytes(20, 20, seed=s) for s in range(3)]
    rows: list = [{"body": raw} for raw in raws]
    rows.insert(position, {"body": small})
    for model, takes_it in ((ToyClassifier(), True), (FixedSize(), False)):
        (tmp_path / str(takes_it)).mkdir()
        handler, context = vision_handler(ImageClassifier, model, tmp_path / str(takes_it), {"image_size": 16})
        results = run_batch(handler, context, rows)
        if takes_it:
            assert results[position] == pytest.approx(run_batch(handler, context, [{"body": small}])[0])
        else:
            assert_row_error(results[position], context, position, 400, "input of shape (3, 8, 8) float32",
                             "it answers inputs of shape (3, 16, 16) float32")  # fmt: skip
        alone = [run_batch(handler, context, [{"body": raw}])[0] for raw in raws]
        assert [r for i, r in enumerate(results) if i != position] == [pytest.approx(a) for a in alone]


def test_images_the_transforms_leave_in_their_size_are_each_answered(tmp_path):
    handler, context = vision_handler(ImageClassifier, ToyClassifier(), tmp_path, {"resize": None, "crop": None})
    raws = [png_bytes(20, 20, seed=1), png_bytes(12, 9, seed=2), png_bytes(20, 20, seed=3)]
    rows = [{"body": raw} for raw in raws] + [{"body": [[[1.0, 2.0, 3.0]]]}]
    results = run_batch(handler, context, rows)
    assert [context.get_response_status(i)[0] for i in range(4)] == [200, 200, 200, 400]
    assert "has 1 channels; this model's images have 3" in results[3]["message"]
    alone = [run_batch(handler, context, [{"body": raw}])[0] for raw in raws]
    assert results[:3] == [pytest.approx(a) for a in alone]
