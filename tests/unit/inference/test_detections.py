"""The plan's check compares a detector's output as sets: two detections tied within rounding may swap order."""

from __future__ import annotations

import numpy as np

import serve
from serve.inference.optimized import mismatch


def detections(order: list[int], scores: list[float] | None = None) -> list[dict[str, serve.Tensor]]:
    boxes = np.array([[0, 0, 10, 10], [5, 5, 20, 30], [1, 2, 3, 4]], dtype=np.float32)
    labels = np.array([1, 1, 7], dtype=np.int64)
    score = np.array(scores or [0.9, 0.9000001, 0.3], dtype=np.float32)
    masks = np.zeros((3, 1, 24, 24), dtype=np.float32)  # each detection's blob at its own place
    for k, (y, x) in enumerate([(2, 2), (8, 12), (14, 4)]):
        masks[k, 0, y : y + 8, x : x + 8] = 0.9
    rows = np.asarray(order)
    return [{"boxes": serve.from_numpy(boxes[rows]), "labels": serve.from_numpy(labels[rows]),
             "scores": serve.from_numpy(score[rows]), "masks": serve.from_numpy(masks[rows])}]  # fmt: skip


def test_two_tied_detections_in_the_other_order_are_the_same_answer():
    assert mismatch(detections([1, 0, 2]), detections([0, 1, 2])) is None


def test_a_detection_that_differs_is_still_a_mismatch():
    assert "output" in mismatch(detections([0, 1, 2], [0.9, 0.95, 0.3]), detections([0, 1, 2]))
    swapped_labels = detections([0, 1, 2])
    swapped_labels[0]["labels"] = serve.from_numpy(np.array([1, 7, 7], dtype=np.int64))
    assert mismatch(swapped_labels, detections([0, 1, 2])) is not None
    fewer = [{k: v[:2] for k, v in detections([0, 1, 2])[0].items()}]
    assert "shape" in mismatch(fewer, detections([0, 1, 2]))


def test_masks_follow_their_boxes_when_rows_are_put_in_order():
    got = detections([1, 0, 2])
    got[0]["masks"] = serve.from_numpy(np.ascontiguousarray(got[0]["masks"].numpy()[[1, 0, 2]]))  # masks not moved
    assert "output 3" in mismatch(got, detections([0, 1, 2]))


def test_scores_are_held_to_an_absolute_tolerance():
    want = detections([0, 1, 2])
    assert mismatch(detections([0, 1, 2], [0.9, 0.9000001, 0.3 + 7e-5]), want) is None  # a pixel-wide box's 7e-5
    assert "output 2" in mismatch(detections([0, 1, 2], [0.9, 0.9000001, 0.3 + 2e-3]), want)  # the score index


def test_detector_inputs_stand_for_a_landscape_photo_after_the_transform():
    from serve.compat.torchvision.models.detection.transform import GeneralizedRCNNTransform
    from serve.inference.detections import detector_inputs

    model = serve.nn.Module()
    model.transform = GeneralizedRCNNTransform(800, 1333, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    (images,) = detector_inputs(model, 2)
    assert [tuple(i.shape) for i in images] == [(3, 800, 1066)] * 2
    resized, _ = model.transform(images[:1])  # already the transform's size: a 320 x 240 picture's too
    assert tuple(resized.tensors.shape) == (1, 3, 800, 1088)
    assert tuple(model.transform([serve.rand(3, 240, 320)])[0].tensors.shape) == (1, 3, 800, 1088)
    model.transform = GeneralizedRCNNTransform(320, 400, [0.5] * 3, [0.5] * 3)
    assert tuple(detector_inputs(model, 1)[0][0].shape) == (3, 320, 400)  # max_size bounds the width
    assert detector_inputs(serve.nn.Linear(2, 2), 1) is None


def test_masks_cut_at_one_half_may_move_by_a_pixel_at_their_edge_only():
    want = detections([0, 1, 2])
    moved = detections([0, 1, 2])
    masks = moved[0]["masks"].numpy().copy()
    masks[1] = np.roll(masks[1], 1, axis=2)  # the paste one pixel to the right (a box truncated the other way)
    masks[2, 0, 14:22, 3] = 0.7  # and one column wider
    moved[0]["masks"] = serve.from_numpy(masks)
    assert mismatch(moved, want) is None
    holed = detections([0, 1, 2])
    masks = holed[0]["masks"].numpy().copy()
    masks[1, 0, 11, 15] = 0.1  # a pixel inside the blob, 3 from its edge
    holed[0]["masks"] = serve.from_numpy(masks)
    assert "output 3" in mismatch(holed, want)
    far = detections([0, 1, 2])
    masks = far[0]["masks"].numpy().copy()
    masks[0] = np.roll(masks[0], 4, axis=1)  # moved 4 pixels
    far[0]["masks"] = serve.from_numpy(masks)
    assert "output 3" in mismatch(far, want)
