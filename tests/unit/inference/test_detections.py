"""The plan's check compares a detector's output as sets: two detections tied within rounding may swap order."""

from __future__ import annotations

import numpy as np

import serve
from serve.inference.optimized import mismatch


def detections(order: list[int], scores: list[float] | None = None) -> list[dict[str, serve.Tensor]]:
    boxes = np.array([[0, 0, 10, 10], [5, 5, 20, 30], [1, 2, 3, 4]], dtype=np.float32)
    labels = np.array([1, 1, 7], dtype=np.int64)
    score = np.array(scores or [0.9, 0.9000001, 0.3], dtype=np.float32)
    masks = np.arange(3 * 4, dtype=np.float32).reshape(3, 1, 2, 2)
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
