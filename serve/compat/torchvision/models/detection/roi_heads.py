"""`torchvision.models.detection.roi_heads.RoIHeads` for inference (the box branch of Fast R-CNN, and Mask R-CNN's
mask branch).

Each proposal is pooled (MultiScaleRoIAlign), classified, and its box regressed per class; then per image: class
probabilities by softmax, boxes decoded per class (weights 10, 10, 5, 5) and clipped, the background class
dropped, detections with score <= score_thresh and boxes under 0.01 pixels removed, NMS within each class at
nms_thresh, and the best `detections_per_img` kept. With `mask_roi_pool`, `mask_head` and `mask_predictor` set
(MaskRCNN sets them, as torchvision's does), the detected boxes are pooled again and each gets the sigmoid of its
class's mask logits, (K, 1, 28, 28), as "masks" (torchvision's maskrcnn_inference); the keypoint branch is not here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import serve
from serve import nn
from serve.compat.torchvision.models.detection._boxes import BoxCoder
from serve.compat.torchvision.models.detection.rpn import batched_nms_np


class RoIHeads(nn.Module):
    def __init__(self, box_roi_pool: nn.Module, box_head: nn.Module, box_predictor: nn.Module,
                 fg_iou_thresh: float, bg_iou_thresh: float, batch_size_per_image: int, positive_fraction: float,
                 bbox_reg_weights: tuple[float, float, float, float] | None, score_thresh: float, nms_thresh: float,
                 detections_per_img: int, **kwargs: Any) -> None:  # fmt: skip
        super().__init__()
        self.box_roi_pool, self.box_head, self.box_predictor = box_roi_pool, box_head, box_predictor
        self.box_coder = BoxCoder(bbox_reg_weights or (10.0, 10.0, 5.0, 5.0))
        self.score_thresh, self.nms_thresh, self.detections_per_img = score_thresh, nms_thresh, detections_per_img
        self.mask_roi_pool: nn.Module | None = kwargs.pop("mask_roi_pool", None)
        self.mask_head: nn.Module | None = kwargs.pop("mask_head", None)
        self.mask_predictor: nn.Module | None = kwargs.pop("mask_predictor", None)
        unsupported = sorted(k for k, v in kwargs.items() if v is not None)
        if unsupported:
            raise NotImplementedError(f"RoIHeads on serve has the box and mask branches; got {unsupported} (keypoint)")

    def has_mask(self) -> bool:
        return self.mask_roi_pool is not None and self.mask_head is not None and self.mask_predictor is not None

    def _masks(self, features: dict[str, serve.Tensor], result: list[dict[str, Any]],
               image_shapes: list[tuple[int, int]]) -> None:  # fmt: skip
        """Each detection's mask probabilities, (K, 1, 28, 28), into its image's dict as "masks"."""
        boxes = [serve.from_numpy(np.ascontiguousarray(r["boxes"])) for r in result]
        pooled = self.mask_roi_pool(features, boxes, image_shapes)  # type: ignore[misc]  # (K, C, 14, 14)
        logits = self.mask_predictor(self.mask_head(pooled)).detach().cpu().numpy()  # type: ignore[misc]
        start = 0
        for r in result:
            stop = start + len(r["labels"])
            chosen = logits[np.arange(start, stop), r["labels"]][:, None]  # (K, 1, 28, 28): the detected class's
            r["masks"] = (0.5 + 0.5 * np.tanh(0.5 * chosen)).astype(np.float32)  # the sigmoid, without overflow
            start = stop

    def _detections(self, logits: np.ndarray, deltas: np.ndarray, proposals: np.ndarray, size: tuple[int, int]
                    ) -> dict[str, Any]:  # fmt: skip
        classes = logits.shape[-1]
        boxes = self.box_coder.decode(deltas, proposals)  # (R, classes, 4)
        height, width = size
        boxes[..., 0::2] = np.clip(boxes[..., 0::2], 0, width)
        boxes[..., 1::2] = np.clip(boxes[..., 1::2], 0, height)
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        scores = shifted / shifted.sum(axis=-1, keepdims=True)  # softmax over classes
        labels = np.broadcast_to(np.arange(classes), scores.shape)
        boxes, scores, labels = boxes[:, 1:].reshape(-1, 4), scores[:, 1:].reshape(-1), labels[:, 1:].reshape(-1)
        keep = scores > self.score_thresh
        keep &= (boxes[:, 2] - boxes[:, 0] >= 1e-2) & (boxes[:, 3] - boxes[:, 1] >= 1e-2)
        boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
        kept = batched_nms_np(boxes, scores, labels, self.nms_thresh)[: self.detections_per_img]
        return {"boxes": boxes[kept], "labels": labels[kept].astype(np.int64), "scores": scores[kept]}

    def forward(self, features: dict[str, serve.Tensor], proposals: list[np.ndarray],
                image_shapes: list[tuple[int, int]], targets: Any = None
                ) -> tuple[list[dict[str, Any]], dict]:  # fmt: skip
        boxes = [serve.from_numpy(np.ascontiguousarray(p)) for p in proposals]
        pooled = self.box_roi_pool(features, boxes, image_shapes)  # (R, C, 7, 7)
        class_logits, box_regression = self.box_predictor(self.box_head(pooled))
        logits, deltas = class_logits.detach().cpu().numpy(), box_regression.detach().cpu().numpy()
        result, start = [], 0
        for p, size in zip(proposals, image_shapes):
            stop = start + len(p)
            result.append(self._detections(logits[start:stop], deltas[start:stop], p, size))
            start = stop
        if self.has_mask():
            self._masks(features, result, image_shapes)
        return result, {}
