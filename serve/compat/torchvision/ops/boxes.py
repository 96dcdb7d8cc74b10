"""`torchvision.ops` box operations: nms, batched_nms, box_iou, box_area, clip_boxes_to_image,
remove_small_boxes, box_convert, generalized_box_iou. Boxes are (N, 4) as (x1, y1, x2, y2) with 0 <= x1 < x2,
0 <= y1 < y2, areas `(x2 - x1) * (y2 - y1)` (no +1), as torchvision.

nms keeps, by decreasing score, each box whose IoU with every kept box is at most `iou_threshold`.
batched_nms runs it per category and merges the kept indices by decreasing score: torchvision's exact per-class
form, rather than its coordinate-offset shortcut, which gives the same boxes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import serve
from serve.compat.torchvision.ops._arrays import array, boxes_array, tensor

__all__ = ["batched_nms", "box_area", "box_convert", "box_iou", "clip_boxes_to_image", "generalized_box_iou", "nms",
           "remove_small_boxes"]  # fmt: skip


def _area(b: np.ndarray) -> np.ndarray:
    return (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])


def _iou(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(IoU, union), each (N, M)."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])  # (N, M, 2)
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = np.clip(rb - lt, 0, None)
    inter = wh[..., 0] * wh[..., 1]
    union = _area(a)[:, None] + _area(b)[None, :] - inter
    return inter / union, union


def box_area(boxes: serve.Tensor) -> serve.Tensor:
    return tensor(_area(boxes_array(boxes, "box_area")), boxes)


def box_iou(boxes1: serve.Tensor, boxes2: serve.Tensor) -> serve.Tensor:
    """(N, M) intersection over union."""
    return tensor(_iou(boxes_array(boxes1, "box_iou"), boxes_array(boxes2, "box_iou"))[0], boxes1)


def generalized_box_iou(boxes1: serve.Tensor, boxes2: serve.Tensor) -> serve.Tensor:
    """IoU minus the part of the enclosing box not covered by the union (Rezatofighi et al., 2019)."""
    a, b = boxes_array(boxes1, "generalized_box_iou"), boxes_array(boxes2, "generalized_box_iou")
    iou, union = _iou(a, b)
    lt = np.minimum(a[:, None, :2], b[None, :, :2])
    rb = np.maximum(a[:, None, 2:], b[None, :, 2:])
    wh = np.clip(rb - lt, 0, None)
    enclosing = wh[..., 0] * wh[..., 1]
    return tensor(iou - (enclosing - union) / enclosing, boxes1)


def _nms(b: np.ndarray, s: np.ndarray, threshold: float) -> np.ndarray:
    order = np.argsort(-s, kind="stable")
    areas = _area(b)
    suppressed = np.zeros(len(b), dtype=bool)
    keep = []
    for pos, i in enumerate(order):
        if suppressed[i]:
            continue
        keep.append(i)
        rest = order[pos + 1 :]
        rest = rest[~suppressed[rest]]
        if rest.size == 0:
            break
        w = np.clip(np.minimum(b[i, 2], b[rest, 2]) - np.maximum(b[i, 0], b[rest, 0]), 0, None)
        h = np.clip(np.minimum(b[i, 3], b[rest, 3]) - np.maximum(b[i, 1], b[rest, 1]), 0, None)
        inter = w * h
        suppressed[rest[inter / (areas[i] + areas[rest] - inter) > threshold]] = True
    return np.asarray(keep, dtype=np.int64)


def _scores(scores: Any, n: int, name: str) -> np.ndarray:
    s = array(scores, name, "scores")
    if s.shape != (n,):
        raise ValueError(f"{name}: scores should be of shape ({n},), one per box, got {tuple(s.shape)}")
    return s


def nms(boxes: serve.Tensor, scores: serve.Tensor, iou_threshold: float) -> serve.Tensor:
    """int64 indices of the kept boxes, by decreasing score."""
    b = boxes_array(boxes, "nms")
    return tensor(_nms(b, _scores(scores, len(b), "nms"), float(iou_threshold)), boxes)


def batched_nms(boxes: serve.Tensor, scores: serve.Tensor, idxs: serve.Tensor, iou_threshold: float) -> serve.Tensor:
    """nms within each category of `idxs`; int64 indices of the kept boxes, by decreasing score."""
    b = boxes_array(boxes, "batched_nms")
    s = _scores(scores, len(b), "batched_nms")
    labels = array(idxs, "batched_nms", "idxs").reshape(-1)
    if labels.shape != (len(b),):
        raise ValueError(f"batched_nms: idxs should have one category per box ({len(b)}), got {labels.shape[0]}")
    kept = [np.flatnonzero(labels == c)[_nms(b[labels == c], s[labels == c], float(iou_threshold))]
            for c in np.unique(labels)]  # fmt: skip
    keep = np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)
    keep = keep[np.argsort(-s[keep], kind="stable")]
    return tensor(keep.astype(np.int64), boxes)


def clip_boxes_to_image(boxes: serve.Tensor, size: tuple[int, int]) -> serve.Tensor:
    """Boxes (..., 4) clipped to an image of `size` = (height, width)."""
    b = array(boxes, "clip_boxes_to_image", "boxes").copy()
    height, width = size
    b[..., 0::2] = np.clip(b[..., 0::2], 0, width)
    b[..., 1::2] = np.clip(b[..., 1::2], 0, height)
    return tensor(b, boxes)


def remove_small_boxes(boxes: serve.Tensor, min_size: float) -> serve.Tensor:
    """int64 indices of the boxes whose width and height are both at least `min_size`."""
    b = boxes_array(boxes, "remove_small_boxes")
    keep = (b[:, 2] - b[:, 0] >= min_size) & (b[:, 3] - b[:, 1] >= min_size)
    return tensor(np.flatnonzero(keep).astype(np.int64), boxes)


_FORMATS = ("xyxy", "xywh", "cxcywh")


def box_convert(boxes: serve.Tensor, in_fmt: str, out_fmt: str) -> serve.Tensor:
    """Convert between xyxy, xywh (corner + size) and cxcywh (centre + size)."""
    if in_fmt not in _FORMATS or out_fmt not in _FORMATS:
        raise ValueError(f"Unsupported Bounding Box Conversions for given in_fmt {in_fmt} and out_fmt {out_fmt}; "
                         f"formats are {', '.join(_FORMATS)}")  # fmt: skip
    b = array(boxes, "box_convert", "boxes")
    if in_fmt == out_fmt:
        return tensor(b.copy(), boxes)
    if in_fmt == "xywh":
        b = np.concatenate([b[..., :2], b[..., :2] + b[..., 2:]], axis=-1)
    elif in_fmt == "cxcywh":
        b = np.concatenate([b[..., :2] - b[..., 2:] / 2, b[..., :2] + b[..., 2:] / 2], axis=-1)
    if out_fmt == "xywh":
        b = np.concatenate([b[..., :2], b[..., 2:] - b[..., :2]], axis=-1)
    elif out_fmt == "cxcywh":
        b = np.concatenate([(b[..., :2] + b[..., 2:]) / 2, b[..., 2:] - b[..., :2]], axis=-1)
    return tensor(b.astype(array(boxes, "box_convert", "boxes").dtype, copy=False), boxes)
