"""`torchvision.models.detection.ssd` on serve, for inference: the SSD detector (Liu et al., 2016) and its scoring
heads. (The VGG-16 `ssd300_vgg16` builder is not here; `ssdlite320_mobilenet_v3_large` is, in ssdlite.py.)

Images are resized to the fixed `size`, normalised, and batched without padding. Per image: class probabilities
by softmax; boxes decoded from the default boxes (weights 10, 10, 5, 5) and clipped; for each foreground class
the scores above score_thresh, the best `topk_candidates`; then NMS within each class and the best
`detections_per_img`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

import serve
from serve import nn
from serve.compat.torchvision.models.detection._boxes import BoxCoder
from serve.compat.torchvision.models.detection.anchor_utils import DefaultBoxGenerator
from serve.compat.torchvision.models.detection.rpn import _flatten, batched_nms_np
from serve.compat.torchvision.models.detection.transform import GeneralizedRCNNTransform

__all__ = ["SSD", "SSDScoringHead"]


class SSDScoringHead(nn.Module):
    """One module per level (`module_list.k`), each output flattened to (N, H * W * A, num_columns)."""

    def __init__(self, module_list: nn.ModuleList, num_columns: int) -> None:
        super().__init__()
        self.module_list = module_list
        self.num_columns = num_columns

    def forward(self, x: list[serve.Tensor]) -> np.ndarray:
        outs = [_flatten(m(f).detach().cpu().numpy(), self.num_columns) for m, f in zip(self.module_list, x)]
        return np.concatenate(outs, axis=1)  # (N, all anchors, num_columns)


class SSD(nn.Module):
    def __init__(self, backbone: nn.Module, anchor_generator: DefaultBoxGenerator, size: tuple[int, int],
                 num_classes: int, image_mean: list[float] | None = None, image_std: list[float] | None = None,
                 head: nn.Module | None = None, score_thresh: float = 0.01, nms_thresh: float = 0.45,
                 detections_per_img: int = 200, iou_thresh: float = 0.5, topk_candidates: int = 400,
                 positive_fraction: float = 0.25, **kwargs: Any) -> None:  # fmt: skip
        super().__init__()
        if head is None:
            raise NotImplementedError("SSD on serve needs an explicit head (SSDLiteHead); the VGG SSDHead is not here")
        self.backbone, self.anchor_generator, self.head = backbone, anchor_generator, head
        self.box_coder = BoxCoder(weights=(10.0, 10.0, 5.0, 5.0))
        self.transform = GeneralizedRCNNTransform(min(size), max(size), image_mean or [0.485, 0.456, 0.406],
                                                  image_std or [0.229, 0.224, 0.225], size_divisible=1,
                                                  fixed_size=size, **kwargs)  # fmt: skip
        self.score_thresh, self.nms_thresh = score_thresh, nms_thresh
        self.detections_per_img, self.topk_candidates = detections_per_img, topk_candidates

    def _detections(self, logits: np.ndarray, deltas: np.ndarray, anchors: np.ndarray, size: tuple[int, int]
                    ) -> dict[str, np.ndarray]:  # fmt: skip
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        scores = shifted / shifted.sum(axis=-1, keepdims=True)  # (anchors, classes)
        boxes = self.box_coder.decode(deltas, anchors)[:, 0, :]
        height, width = size
        boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, width)
        boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, height)
        picked_boxes, picked_scores, picked_labels = [], [], []
        for label in range(1, scores.shape[-1]):
            idx = np.flatnonzero(scores[:, label] > self.score_thresh)
            idx = idx[np.argsort(-scores[idx, label], kind="stable")[: self.topk_candidates]]
            picked_boxes.append(boxes[idx])
            picked_scores.append(scores[idx, label])
            picked_labels.append(np.full(len(idx), label, dtype=np.int64))
        b, s, lab = np.concatenate(picked_boxes), np.concatenate(picked_scores), np.concatenate(picked_labels)
        keep = batched_nms_np(b, s, lab, self.nms_thresh)[: self.detections_per_img]
        return {"boxes": b[keep], "scores": s[keep], "labels": lab[keep]}

    def forward(self, images: list[serve.Tensor], targets: Any = None) -> list[dict[str, serve.Tensor]]:
        if targets is not None or self.training:
            raise NotImplementedError("serve's detection models run inference only: call model.eval() and pass no "
                                      "targets")  # fmt: skip
        original_sizes = [(int(img.shape[-2]), int(img.shape[-1])) for img in images]
        image_list, _ = self.transform(images)
        features = self.backbone(image_list.tensors)
        if isinstance(features, serve.Tensor):
            features = OrderedDict([("0", features)])
        maps = list(features.values())
        outputs = self.head(maps)
        anchors = self.anchor_generator(image_list, maps)
        detections = [self._detections(outputs["cls_logits"][i], outputs["bbox_regression"][i], anchors[i], size)
                      for i, size in enumerate(image_list.image_sizes)]  # fmt: skip
        detections = self.transform.postprocess(detections, image_list.image_sizes, original_sizes)
        return [{k: serve.from_numpy(np.ascontiguousarray(v)) for k, v in d.items()} for d in detections]
