"""Detections compared as sets in the plan's check: the plan's rows put in eager's order before the comparison.

A detector (torchvision's Faster R-CNN, Mask R-CNN, RetinaNet) returns per image a dict of "boxes" (K, 4),
"labels" (K,) and "scores" (K,) (and "masks" (K, 1, H, W)), its rows sorted by score. Two detections whose scores
differ by less than the plan's rounding (2e-7 apart on TorchServe's fast-rcnn example) come out in either order,
and an element-wise check then called a correct plan wrong: the plan was thrown away after the first request had
paid for making it (59 s), and that request ran the model a second time, eagerly (issue 26). So `aligned(got,
want)` gives the plan's output with each such dict's rows in eager's order: every eager row, in order, takes the
unused plan row of the same label whose box is nearest. The element-wise comparison then holds boxes and scores to
the plan's tolerance as before; a different row count, or a label with no partner, is still a mismatch (its rows
are left as they were).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from serve.tensor.creation import from_numpy
from serve.tensor.tensor import Tensor

KEYS = ("boxes", "labels", "scores")


def aligned(got: Any, want: Any) -> Any:
    """`got` with each detection dict's rows in the order of its counterpart in `want` (module docstring), as plain
    lists and dicts: only its tensors are read afterwards (`mismatch` flattens it)."""
    if isinstance(got, dict) and isinstance(want, dict):
        if all(isinstance(got.get(k), Tensor) and isinstance(want.get(k), Tensor) for k in KEYS):
            return _reordered(got, want)
        return {k: aligned(v, want.get(k)) for k, v in got.items()}
    if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)) and len(got) == len(want):
        return [aligned(g, w) for g, w in zip(got, want)]  # a plain list: only the tensors are compared
    return got


def _numpy(t: Tensor) -> np.ndarray:
    return np.asarray(t._ops.to_numpy(t._data))


def _reordered(got: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    boxes, labels = _numpy(got["boxes"]), _numpy(got["labels"])
    want_boxes, want_labels = _numpy(want["boxes"]), _numpy(want["labels"])
    if boxes.shape != want_boxes.shape or labels.shape != want_labels.shape or boxes.ndim != 2:
        return got
    free = np.ones(len(labels), dtype=bool)
    order = []
    for box, label in zip(want_boxes, want_labels):
        candidates = np.flatnonzero(free & (labels == label))
        if not len(candidates):
            return got
        best = candidates[np.argmin(np.abs(boxes[candidates] - box).max(axis=1))]
        free[best] = False
        order.append(best)
    rows = np.asarray(order, dtype=np.int64)
    out: dict[str, Any] = {}
    for key, value in got.items():  # every per-detection tensor (masks too) follows the boxes
        if isinstance(value, Tensor) and value.dim() >= 1 and int(value.shape[0]) == len(rows):
            out[key] = from_numpy(np.ascontiguousarray(_numpy(value)[rows]))
        else:
            out[key] = value
    return out
