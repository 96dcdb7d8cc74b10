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

Scores are probabilities, held to SCORE_ATOL (absolute) rather than to 1e-4 of the largest: on a box a pixel wide
RoIAlign's bilinear weights amplify the backbone's rounding (7e-5 measured on a stand-in Faster R-CNN, beside 1e-6 on
ordinary boxes), and a score 1e-3 off moves only a detection within 1e-3 of a handler's threshold across it. A plan
row whose score is that close takes eager's, so the element-wise comparison passes it; any farther fails as before.

Masks (Mask R-CNN's (K, 1, H, W) probabilities pasted into the image) are compared as a user reads them, at 0.5:
the box is truncated to whole pixels before the 28 x 28 mask is resized into it, so a box 1e-3 px apart can move the
paste by a pixel (0.148 measured on a stand-in's noise input). A plan row's mask whose 0.5 cut differs from eager's
only within MASK_EDGE_PX of eager's edge takes eager's; a pixel off anywhere else (a mask from another class, moved
or misshapen) fails the check as before.

Planned before traffic (issue 26): TorchServe's object_detector handlers have no `example_inputs` (the images keep
their sizes), so the first request used to pay for the plan (59-90 s at 800 x 1066 on a loaded 2-core machine,
beyond a 120 s response timeout). `detector_inputs(model, b)` gives the worker (serve/worker/optimizing.py) a warm-up
input for a model it recognises as a torchvision detector (a `transform` with torchvision's `min_size`, `max_size`
and `image_mean`, as GeneralizedRCNNTransform has): b seeded noise images already at the transform's size for a 4:3
picture, (3, min_size, min(4/3 min_size, max_size)), the shape a camera's landscape photo takes after the resize
(800 x 1066; the batch is padded to 800 x 1088). The plan's rewrite does not depend on the image size; its kernels are
timed per shape, so an image of another aspect ratio pays for its timing at its first request, as any new shape
does, but never for the plan.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from serve.tensor.creation import from_numpy
from serve.tensor.tensor import Tensor

KEYS = ("boxes", "labels", "scores")
SCORE_ATOL = 1e-3  # a detection score's tolerance in the plan's check (module docstring)
LANDSCAPE = 4 / 3  # the warm-up image's width / height
MASK_EDGE_PX = 2  # a pasted mask's 0.5 cut may move this far (module docstring)


def detector_inputs(model: Any, batch_size: int) -> tuple[list[Tensor]] | None:
    """The warm-up input for a torchvision detector: ([b images (3, H, W)],) at its transform's size (module
    docstring), or None for any other model."""
    transform = getattr(model, "transform", None)
    min_size, max_size = getattr(transform, "min_size", None), getattr(transform, "max_size", None)
    if not (hasattr(transform, "image_mean") and isinstance(max_size, int) and min_size):
        return None
    height = int(min_size[-1] if isinstance(min_size, (tuple, list)) else min_size)
    width = min(int(height * LANDSCAPE), max_size)
    rng = np.random.default_rng(0)
    return ([from_numpy(rng.random((3, height, width), dtype=np.float32)) for _ in range(batch_size)],)


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
    scores, want_scores = _numpy(out["scores"]), _numpy(want["scores"])
    if scores.shape == want_scores.shape:  # within SCORE_ATOL: eager's score, so the comparison passes it
        out["scores"] = from_numpy(np.where(np.abs(scores - want_scores) <= SCORE_ATOL, want_scores, scores))
    if isinstance(out.get("masks"), Tensor) and isinstance(want.get("masks"), Tensor):
        masks, want_masks = _numpy(out["masks"]), _numpy(want["masks"])
        if masks.shape == want_masks.shape and masks.ndim == 4:
            kept = [
                want_masks[k] if _edges_only(masks[k, 0], want_masks[k, 0]) else masks[k] for k in range(len(masks))
            ]
            out["masks"] = from_numpy(np.ascontiguousarray(np.stack(kept)) if kept else masks)
    return out


def _edges_only(got: np.ndarray, want: np.ndarray) -> bool:
    """Whether two (H, W) mask probabilities cut at 0.5 differ only within MASK_EDGE_PX of `want`'s edge."""
    a, b = got >= 0.5, want >= 0.5
    rows, cols = np.flatnonzero((a | b).any(axis=1)), np.flatnonzero((a | b).any(axis=0))
    if not len(rows):
        return True
    m = MASK_EDGE_PX + 1  # the region both cuts lie in, with a margin for the band
    r0, r1, c0, c1 = max(rows[0] - m, 0), rows[-1] + m + 1, max(cols[0] - m, 0), cols[-1] + m + 1
    a, b = a[r0:r1, c0:c1], b[r0:r1, c0:c1]
    band = _grown(b, MASK_EDGE_PX) & _grown(~b, MASK_EDGE_PX)  # within the distance of both inside and outside
    return not bool(((a ^ b) & ~band).any())


def _grown(mask: np.ndarray, steps: int) -> np.ndarray:
    """`mask` dilated by `steps` pixels (8-neighbourhood)."""
    for _ in range(steps):
        padded = np.pad(mask, 1)
        h, w = mask.shape
        mask = np.zeros_like(mask)
        for dy in range(3):
            for dx in range(3):
                mask |= padded[dy : dy + h, dx : dx + w]
    return mask
