"""`torchvision.models.detection.rpn`: RPNHead and RegionProposalNetwork (Faster R-CNN, Ren et al., 2015), for
inference.

The head scores A anchors per cell of every level (a shared 3x3 conv, then 1x1 `cls_logits` and `bbox_pred`).
Proposals: per image and level the `pre_nms_top_n` highest objectness scores, their anchors moved by the
predicted deltas, clipped to the image, boxes under 1e-3 pixels and scores under `score_thresh` dropped, NMS
within each level at `nms_thresh`, the best `post_nms_top_n` kept.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import serve
from serve import nn
from serve.compat.torchvision.models.detection._boxes import BoxCoder, ImageList
from serve.compat.torchvision.models.detection.anchor_utils import AnchorGenerator
from serve.compat.torchvision.ops.boxes import _nms
from serve.zoo.layers import Conv2dNormActivation


class RPNHead(nn.Module):
    def __init__(self, in_channels: int, num_anchors: int, conv_depth: int = 1) -> None:
        super().__init__()
        self.conv = nn.Sequential(*[Conv2dNormActivation(in_channels, in_channels, kernel_size=3, norm_layer=None)
                                    for _ in range(conv_depth)])  # fmt: skip
        self.cls_logits = nn.Conv2d(in_channels, num_anchors, kernel_size=1, stride=1)
        self.bbox_pred = nn.Conv2d(in_channels, num_anchors * 4, kernel_size=1, stride=1)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, local_metadata: dict, strict: bool,
                              missing_keys: list[str], unexpected_keys: list[str], error_msgs: list[str]
                              ) -> None:  # fmt: skip
        for kind in ("weight", "bias"):  # checkpoints from before torchvision 0.13: conv.weight -> conv.0.0.weight
            old, new = f"{prefix}conv.{kind}", f"{prefix}conv.0.0.{kind}"
            if old in state_dict and new not in state_dict:
                state_dict[new] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)  # fmt: skip

    def forward(self, x: list[serve.Tensor]) -> tuple[list[serve.Tensor], list[serve.Tensor]]:
        logits, bbox_reg = [], []
        for feature in x:
            t = self.conv(feature)
            logits.append(self.cls_logits(t))  # (N, A, H, W)
            bbox_reg.append(self.bbox_pred(t))  # (N, A * 4, H, W)
        return logits, bbox_reg


def _flatten(layer: np.ndarray, channels: int) -> np.ndarray:
    """(N, A * C, H, W) -> (N, H * W * A, C), cell-major like the anchors."""
    n, _, h, w = layer.shape
    return layer.reshape(n, -1, channels, h, w).transpose(0, 3, 4, 1, 2).reshape(n, -1, channels)


class RegionProposalNetwork(nn.Module):
    def __init__(self, anchor_generator: AnchorGenerator, head: nn.Module, fg_iou_thresh: float, bg_iou_thresh: float,
                 batch_size_per_image: int, positive_fraction: float, pre_nms_top_n: dict[str, int],
                 post_nms_top_n: dict[str, int], nms_thresh: float, score_thresh: float = 0.0) -> None:  # fmt: skip
        super().__init__()
        self.anchor_generator = anchor_generator
        self.head = head
        self.box_coder = BoxCoder(weights=(1.0, 1.0, 1.0, 1.0))
        self._pre_nms_top_n, self._post_nms_top_n = pre_nms_top_n, post_nms_top_n
        self.nms_thresh, self.score_thresh, self.min_size = nms_thresh, score_thresh, 1e-3

    def pre_nms_top_n(self) -> int:
        return self._pre_nms_top_n["training" if self.training else "testing"]

    def post_nms_top_n(self) -> int:
        return self._post_nms_top_n["training" if self.training else "testing"]

    def _filter(self, proposals: np.ndarray, objectness: np.ndarray, levels: np.ndarray, size: tuple[int, int],
                per_level: list[int]) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        picks, offset = [], 0
        for n in per_level:
            scores = objectness[offset : offset + n]
            top = min(self.pre_nms_top_n(), n)
            picks.append(offset + np.argsort(-scores, kind="stable")[:top])
            offset += n
        idx = np.concatenate(picks)
        boxes, scores, lvl = proposals[idx], 1.0 / (1.0 + np.exp(-objectness[idx])), levels[idx]
        height, width = size
        boxes = np.stack([np.clip(boxes[:, 0], 0, width), np.clip(boxes[:, 1], 0, height),
                          np.clip(boxes[:, 2], 0, width), np.clip(boxes[:, 3], 0, height)], axis=1)  # fmt: skip
        keep = (boxes[:, 2] - boxes[:, 0] >= self.min_size) & (boxes[:, 3] - boxes[:, 1] >= self.min_size)
        keep &= scores >= self.score_thresh
        boxes, scores, lvl = boxes[keep], scores[keep], lvl[keep]
        kept = batched_nms_np(boxes, scores, lvl, self.nms_thresh)[: self.post_nms_top_n()]
        return boxes[kept], scores[kept]

    def forward(self, images: ImageList, features: dict[str, serve.Tensor], targets: Any = None
                ) -> tuple[list[np.ndarray], dict[str, Any]]:  # fmt: skip
        maps = list(features.values())
        objectness, deltas = self.head(maps)
        anchors = self.anchor_generator(images, maps)
        per_level = [int(o.shape[1] * o.shape[2] * o.shape[3]) for o in objectness]
        obj = np.concatenate([_flatten(o.detach().cpu().numpy(), 1) for o in objectness], axis=1)[..., 0]  # (N, A)
        reg = np.concatenate([_flatten(d.detach().cpu().numpy(), 4) for d in deltas], axis=1)  # (N, anchors, 4)
        levels = np.concatenate([np.full(n, i) for i, n in enumerate(per_level)])
        results = []
        for i, size in enumerate(images.image_sizes):
            proposals = self.box_coder.decode(reg[i], anchors[i])[:, 0, :]  # (anchors, 4)
            results.append(self._filter(proposals, obj[i], levels, size, per_level)[0])
        return results, {}


def batched_nms_np(boxes: np.ndarray, scores: np.ndarray, idxs: np.ndarray, threshold: float) -> np.ndarray:
    """NMS per category, the kept indices by decreasing score (numpy form of ops.batched_nms)."""
    kept = [np.flatnonzero(idxs == c)[_nms(boxes[idxs == c], scores[idxs == c], threshold)] for c in np.unique(idxs)]
    keep = np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)
    return keep[np.argsort(-scores[keep], kind="stable")]
