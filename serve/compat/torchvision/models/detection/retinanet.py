"""`torchvision.models.detection.retinanet` on serve, for inference: RetinaNet (Lin et al., 2017, focal loss),
RetinaNetHead and `retinanet_resnet50_fpn`, with torchvision's arguments and state_dict keys.

ResNet-50 layers 2-4 feed an FPN with P6/P7 (LastLevelP6P7 on P5); 9 anchors per cell (3 sizes x 3 ratios).
The heads are four 3x3 conv-ReLU layers each, then 3x3 convs to A * classes logits and A * 4 deltas. Per image and
level: sigmoid scores over every (anchor, class), those above score_thresh, the best `topk_candidates`, boxes
decoded (weights 1) and clipped; then over all levels NMS within each class and the best `detections_per_img`.
Checkpoints from before torchvision 0.13 (`conv.0.weight`, `conv.2.weight`, ...) are renamed on load.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

import serve
from serve import nn
from serve.compat.torchvision.models.detection._boxes import BoxCoder
from serve.compat.torchvision.models.detection._weights import coco_weights
from serve.compat.torchvision.models.detection.anchor_utils import AnchorGenerator
from serve.compat.torchvision.models.detection.backbone_utils import _resnet50_fpn_detector
from serve.compat.torchvision.models.detection.rpn import _flatten, batched_nms_np
from serve.compat.torchvision.models.detection.transform import GeneralizedRCNNTransform
from serve.compat.torchvision.models.resnet import ResNet50_Weights
from serve.zoo.fpn import LastLevelP6P7
from serve.zoo.layers import Conv2dNormActivation

__all__ = ["RetinaNet", "RetinaNetHead", "RetinaNet_ResNet50_FPN_Weights", "retinanet_resnet50_fpn"]


class _Branch(nn.Module):
    """Four 3x3 conv(-norm)-ReLU layers (`conv.i.0`), then one 3x3 conv to `per_anchor` values per anchor."""

    def __init__(self, in_channels: int, num_anchors: int, per_anchor: int, out_name: str,
                 norm_layer: Callable[..., nn.Module] | None) -> None:  # fmt: skip
        super().__init__()
        self.conv = nn.Sequential(*[Conv2dNormActivation(in_channels, in_channels, norm_layer=norm_layer)
                                    for _ in range(4)])  # fmt: skip
        setattr(self, out_name, nn.Conv2d(in_channels, num_anchors * per_anchor, kernel_size=3, stride=1, padding=1))
        self._out_name, self._per_anchor = out_name, per_anchor

    def _load_from_state_dict(self, state_dict: dict, prefix: str, local_metadata: dict, strict: bool,
                              missing_keys: list[str], unexpected_keys: list[str], error_msgs: list[str]
                              ) -> None:  # fmt: skip
        for i in range(4):
            for kind in ("weight", "bias"):
                old, new = f"{prefix}conv.{2 * i}.{kind}", f"{prefix}conv.{i}.0.{kind}"
                if old in state_dict and new not in state_dict:
                    state_dict[new] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)  # fmt: skip

    def forward(self, x: list[serve.Tensor]) -> list[np.ndarray]:
        out = getattr(self, self._out_name)
        return [_flatten(out(self.conv(f)).detach().cpu().numpy(), self._per_anchor) for f in x]  # each (N, HWA, K)


class RetinaNetClassificationHead(_Branch):
    def __init__(self, in_channels: int, num_anchors: int, num_classes: int, prior_probability: float = 0.01,
                 norm_layer: Callable[..., nn.Module] | None = None) -> None:  # fmt: skip
        super().__init__(in_channels, num_anchors, num_classes, "cls_logits", norm_layer)
        self.num_classes, self.num_anchors = num_classes, num_anchors


class RetinaNetRegressionHead(_Branch):
    def __init__(self, in_channels: int, num_anchors: int, norm_layer: Callable[..., nn.Module] | None = None) -> None:
        super().__init__(in_channels, num_anchors, 4, "bbox_reg", norm_layer)


class RetinaNetHead(nn.Module):
    def __init__(self, in_channels: int, num_anchors: int, num_classes: int,
                 norm_layer: Callable[..., nn.Module] | None = None) -> None:  # fmt: skip
        super().__init__()
        self.classification_head = RetinaNetClassificationHead(in_channels, num_anchors, num_classes,
                                                               norm_layer=norm_layer)  # fmt: skip
        self.regression_head = RetinaNetRegressionHead(in_channels, num_anchors, norm_layer=norm_layer)

    def forward(self, x: list[serve.Tensor]) -> dict[str, list[np.ndarray]]:
        return {"cls_logits": self.classification_head(x), "bbox_regression": self.regression_head(x)}


def _default_anchorgen() -> AnchorGenerator:
    sizes = tuple((x, int(x * 2 ** (1.0 / 3)), int(x * 2 ** (2.0 / 3))) for x in (32, 64, 128, 256, 512))
    return AnchorGenerator(sizes, ((0.5, 1.0, 2.0),) * len(sizes))


class RetinaNet(nn.Module):
    def __init__(self, backbone: nn.Module, num_classes: int, min_size: int = 800, max_size: int = 1333,
                 image_mean: list[float] | None = None, image_std: list[float] | None = None,
                 anchor_generator: AnchorGenerator | None = None, head: nn.Module | None = None,
                 proposal_matcher: Any = None, score_thresh: float = 0.05, nms_thresh: float = 0.5,
                 detections_per_img: int = 300, fg_iou_thresh: float = 0.5, bg_iou_thresh: float = 0.4,
                 topk_candidates: int = 1000, **kwargs: Any) -> None:  # fmt: skip
        super().__init__()
        if not hasattr(backbone, "out_channels"):
            raise ValueError("backbone should contain an attribute out_channels specifying the number of output "
                             "channels (assumed to be the same for all the levels)")  # fmt: skip
        self.backbone = backbone
        self.anchor_generator = anchor_generator or _default_anchorgen()
        self.head = head or RetinaNetHead(backbone.out_channels, self.anchor_generator.num_anchors_per_location()[0],
                                          num_classes)  # fmt: skip
        self.box_coder = BoxCoder(weights=(1.0, 1.0, 1.0, 1.0))
        self.transform = GeneralizedRCNNTransform(min_size, max_size, image_mean or [0.485, 0.456, 0.406],
                                                  image_std or [0.229, 0.224, 0.225], **kwargs)  # fmt: skip
        self.score_thresh, self.nms_thresh = score_thresh, nms_thresh
        self.detections_per_img, self.topk_candidates = detections_per_img, topk_candidates

    def _level(self, logits: np.ndarray, deltas: np.ndarray, anchors: np.ndarray, size: tuple[int, int]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        classes = logits.shape[-1]
        scores = (1.0 / (1.0 + np.exp(-logits))).reshape(-1)  # (anchors * classes,)
        idx = np.flatnonzero(scores > self.score_thresh)
        idx = idx[np.argsort(-scores[idx], kind="stable")[: self.topk_candidates]]
        anchor_idx, labels = idx // classes, idx % classes
        boxes = self.box_coder.decode(deltas[anchor_idx], anchors[anchor_idx])[:, 0, :]
        height, width = size
        boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, width)
        boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, height)
        return boxes, scores[idx], labels.astype(np.int64)

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
        per_level = [int(m.shape[-2] * m.shape[-1]) * self.anchor_generator.num_anchors_per_location()[0]
                     for m in maps]  # fmt: skip
        detections = []
        for i, size in enumerate(image_list.image_sizes):
            parts, start = [], 0
            for level, n in enumerate(per_level):
                logits, deltas = outputs["cls_logits"][level][i], outputs["bbox_regression"][level][i]
                parts.append(self._level(logits, deltas, anchors[i][start : start + n], size))
                start += n
            boxes, scores, labels = (np.concatenate(p) for p in zip(*parts))
            keep = batched_nms_np(boxes, scores, labels, self.nms_thresh)[: self.detections_per_img]
            detections.append({"boxes": boxes[keep], "scores": scores[keep], "labels": labels[keep]})
        detections = self.transform.postprocess(detections, image_list.image_sizes, original_sizes)
        return [{k: serve.from_numpy(np.ascontiguousarray(v)) for k, v in d.items()} for d in detections]


RetinaNet_ResNet50_FPN_Weights = coco_weights(
    "RetinaNet_ResNet50_FPN_Weights", "retinanet",
    "https://download.pytorch.org/models/retinanet_resnet50_fpn_coco-eeacb38b.pth", 34014999, 36.4,
)  # fmt: skip


def retinanet_resnet50_fpn(*, weights: Any = None, progress: bool = True, num_classes: int | None = None,
                           weights_backbone: Any = ResNet50_Weights.IMAGENET1K_V1,  # type: ignore[attr-defined]
                           trainable_backbone_layers: int | None = None, **kwargs: Any) -> RetinaNet:  # fmt: skip
    """RetinaNet with a ResNet-50-FPN backbone (P3-P7; weights only from the local torch hub cache)."""
    return _resnet50_fpn_detector(RetinaNet, RetinaNet_ResNet50_FPN_Weights, weights, progress, num_classes,
                                  weights_backbone, trainable_backbone_layers, kwargs, returned_layers=[2, 3, 4],
                                  extra_blocks=LastLevelP6P7(256, 256))  # fmt: skip
