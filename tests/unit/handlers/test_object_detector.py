"""object_detector: a toy detection model with torchvision's interface, answers in TorchServe's shape."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from handlers.object_detector import ObjectDetector
from serve import nn
from tests.unit.handlers.vision_helpers import (
    assert_row_error,
    encode,
    png_bytes,
    random_image,
    run_batch,
    vision_handler,
)

SCORES = [0.9, 0.3, 0.5, 0.7]
LABELS = [1, 2, 0, 5]


def boxes_for(w: float, h: float) -> list[list[float]]:
    return [[0.0, 0.0, w, h], [1.0, 1.0, 2.0, 2.0], [0.5, 0.25, w / 2, h / 2], [2.0, 3.0, 4.0, 5.0]]


class ToyDetector(nn.Module):
    """A list of (C, H, W) images in, per image a dict of boxes (in the image's own size), labels and scores."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, ...]] = []

    def forward(self, images: list[serve.Tensor]) -> list[dict[str, serve.Tensor]]:
        out = []
        for image in images:
            self.seen.append(tuple(image.shape))
            _, h, w = image.shape
            boxes = [
                [0.0, 0.0, float(w), float(h)],
                [1.0, 1.0, 2.0, 2.0],
                [0.5, 0.25, w / 2, h / 2],
                [2.0, 3.0, 4.0, 5.0],
            ]
            out.append({"boxes": serve.tensor(boxes), "labels": serve.tensor(LABELS), "scores": serve.tensor(SCORES)})
        return out


def expected(w: int, h: int, names: dict[int, str] | None = None) -> list[dict]:
    names = names or {}
    return [
        {names.get(label, str(label)): box, "score": pytest.approx(score)}
        for box, label, score in zip(boxes_for(w, h), LABELS, SCORES)
        if score >= 0.5  # TorchServe's threshold keeps a score equal to it
    ]


def test_images_of_different_sizes_in_one_batch_keep_their_size(tmp_path):
    model = ToyDetector()
    handler, context = vision_handler(ObjectDetector, model, tmp_path)
    results = run_batch(handler, context, [{"body": png_bytes(20, 10)}, {"body": png_bytes(7, 9)}])
    assert model.seen == [(3, 10, 20), (3, 9, 7)]  # ToTensor only: no resize, no crop
    assert results == [expected(20, 10), expected(7, 9)]


def test_the_tensor_is_to_tensor_of_the_image(tmp_path):
    model = ToyDetector()
    handler, _ = vision_handler(ObjectDetector, model, tmp_path)
    img = random_image(5, 4, "RGBA")
    (tensor,) = handler.preprocess([{"body": encode(img, "PNG")}])
    np.testing.assert_array_equal(tensor.numpy(), np.asarray(img)[..., :3].transpose(2, 0, 1) / np.float32(255))


@pytest.mark.parametrize(
    "mapping",
    [
        {"object_type_names": ["background", "person", "bicycle", "car"]},
        {"0": "background", "1": ["/m/01g317", "person"], "2": "bicycle"},
    ],
)
def test_labels_through_the_mapping(tmp_path, mapping):
    handler, context = vision_handler(ObjectDetector, ToyDetector(), tmp_path, mapping=mapping)
    (result,) = run_batch(handler, context, [{"body": png_bytes(8, 6)}])
    assert result == expected(8, 6, {0: "background", 1: "person"})  # label 5 is unmapped: its index string


def test_threshold_is_configurable_and_bad_rows_are_per_request(tmp_path):
    handler, context = vision_handler(ObjectDetector, ToyDetector(), tmp_path, {"threshold": 0.8})
    results = run_batch(handler, context, [{"body": b"\x89PNG broken"}, {"body": png_bytes(8, 6)}])
    assert_row_error(results[0], context, 0, 400, "could not decode the image")
    assert results[1] == [{"1": [0.0, 0.0, 8.0, 6.0], "score": pytest.approx(0.9)}]


def test_a_model_that_is_not_a_detector_fails_the_batch(tmp_path):
    class NotADetector(nn.Module):
        def forward(self, images):
            return [{"boxes": serve.zeros(0, 4)} for _ in images]

    handler, context = vision_handler(ObjectDetector, NotADetector(), tmp_path)
    with pytest.raises(RuntimeError, match="no labels, scores"):
        run_batch(handler, context, [{"body": png_bytes(8, 6)}])


class StrictDetector(ToyDetector):
    """As torchvision's detectors: (3, H, W) images only (their normalisation has three means)."""

    def forward(self, images: list[serve.Tensor]) -> list[dict[str, serve.Tensor]]:
        for image in images:
            if image.ndim != 3 or image.shape[0] != 3 or 0 in image.shape:
                raise ValueError(f"expected a (3, H, W) image, got {tuple(image.shape)}")
        return super().forward(images)


@pytest.mark.parametrize("bad", [[[[1.0, 2.0, 3.0]]], [1.0, 2.0], np.zeros((3, 0, 4)).tolist(), {"boxes": []}])
def test_a_nested_list_that_is_not_an_image_fails_alone(tmp_path, bad):
    handler, context = vision_handler(ObjectDetector, StrictDetector(), tmp_path)
    results = run_batch(handler, context, [{"body": bad}, {"body": png_bytes(8, 6)}, {"body": png_bytes(5, 7)}])
    assert results[0]["code"] == 400 and context.get_response_status(0)[0] == 400
    assert results[1:] == [expected(8, 6), expected(5, 7)]
