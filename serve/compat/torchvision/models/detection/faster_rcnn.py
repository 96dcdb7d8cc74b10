"""`torchvision.models.detection.faster_rcnn` on serve, for inference: FasterRCNN (GeneralizedRCNN: transform,
backbone, RPN, RoI heads, boxes mapped back to the input images), TwoMLPHead, FastRCNNPredictor and the
`fasterrcnn_resnet50_fpn` builder, with torchvision's arguments and state_dict keys.

Called as torchvision's in eval mode: `model([image (C, H, W) float in [0, 1], ...])` returns one dict per image
with "boxes" (K, 4) float32 in input pixels, "labels" (K,) int64 and "scores" (K,) float32, as serve tensors.
Training (targets, losses) is not supported: a call with targets is a clear error.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

import serve
import serve.nn.functional as F
from serve import nn
from serve.compat.torchvision.models.detection._weights import coco_weights
from serve.compat.torchvision.models.detection.anchor_utils import AnchorGenerator
from serve.compat.torchvision.models.detection.backbone_utils import _resnet50_fpn_detector
from serve.compat.torchvision.models.detection.roi_heads import RoIHeads
from serve.compat.torchvision.models.detection.rpn import RegionProposalNetwork, RPNHead
from serve.compat.torchvision.models.detection.transform import GeneralizedRCNNTransform
from serve.compat.torchvision.models.resnet import ResNet50_Weights
from serve.compat.torchvision.ops.poolers import MultiScaleRoIAlign

__all__ = ["FastRCNNPredictor", "FasterRCNN", "FasterRCNN_ResNet50_FPN_Weights", "TwoMLPHead",
           "fasterrcnn_resnet50_fpn"]  # fmt: skip


class TwoMLPHead(nn.Module):
    def __init__(self, in_channels: int, representation_size: int) -> None:
        super().__init__()
        self.fc6 = nn.Linear(in_channels, representation_size)
        self.fc7 = nn.Linear(representation_size, representation_size)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return F.relu(self.fc7(F.relu(self.fc6(serve.flatten(x, 1)))))  # (R, C * 7 * 7) -> (R, representation)


class FastRCNNPredictor(nn.Module):
    def __init__(self, in_channels: int, num_classes: int) -> None:
        super().__init__()
        self.cls_score = nn.Linear(in_channels, num_classes)
        self.bbox_pred = nn.Linear(in_channels, num_classes * 4)

    def forward(self, x: serve.Tensor) -> tuple[serve.Tensor, serve.Tensor]:
        if x.dim() == 4 and list(x.shape[2:]) != [1, 1]:
            raise ValueError(
                f"x has the wrong shape, expecting the last two dimensions to be [1,1] instead of {list(x.shape[2:])}"
            )
        x = serve.flatten(x, 1)
        return self.cls_score(x), self.bbox_pred(x)


class GeneralizedRCNN(nn.Module):
    def __init__(self, backbone: nn.Module, rpn: nn.Module, roi_heads: nn.Module, transform: nn.Module) -> None:
        super().__init__()
        self.transform, self.backbone, self.rpn, self.roi_heads = transform, backbone, rpn, roi_heads

    def forward(self, images: list[serve.Tensor], targets: Any = None) -> list[dict[str, serve.Tensor]]:
        if targets is not None or self.training:
            raise NotImplementedError("serve's detection models run inference only: call model.eval() and pass no "
                                      "targets")  # fmt: skip
        original_sizes = [(int(img.shape[-2]), int(img.shape[-1])) for img in images]
        image_list, _ = self.transform(images)
        features = self.backbone(image_list.tensors)
        if isinstance(features, serve.Tensor):
            features = OrderedDict([("0", features)])
        proposals, _ = self.rpn(image_list, features)
        detections, _ = self.roi_heads(features, proposals, image_list.image_sizes)
        detections = self.transform.postprocess(detections, image_list.image_sizes, original_sizes)
        return [{k: serve.from_numpy(np.ascontiguousarray(v)) for k, v in d.items()} for d in detections]


class FasterRCNN(GeneralizedRCNN):
    def __init__(self, backbone: nn.Module, num_classes: int | None = None, min_size: int = 800, max_size: int = 1333,
                 image_mean: list[float] | None = None, image_std: list[float] | None = None,
                 rpn_anchor_generator: AnchorGenerator | None = None, rpn_head: nn.Module | None = None,
                 rpn_pre_nms_top_n_train: int = 2000, rpn_pre_nms_top_n_test: int = 1000,
                 rpn_post_nms_top_n_train: int = 2000, rpn_post_nms_top_n_test: int = 1000,
                 rpn_nms_thresh: float = 0.7, rpn_fg_iou_thresh: float = 0.7, rpn_bg_iou_thresh: float = 0.3,
                 rpn_batch_size_per_image: int = 256, rpn_positive_fraction: float = 0.5, rpn_score_thresh: float = 0.0,
                 box_roi_pool: nn.Module | None = None, box_head: nn.Module | None = None,
                 box_predictor: nn.Module | None = None, box_score_thresh: float = 0.05, box_nms_thresh: float = 0.5,
                 box_detections_per_img: int = 100, box_fg_iou_thresh: float = 0.5, box_bg_iou_thresh: float = 0.5,
                 box_batch_size_per_image: int = 512, box_positive_fraction: float = 0.25,
                 bbox_reg_weights: tuple[float, float, float, float] | None = None, **kwargs: Any) -> None:  # fmt: skip
        if not hasattr(backbone, "out_channels"):
            raise ValueError("backbone should contain an attribute out_channels specifying the number of output "
                             "channels (assumed to be the same for all the levels)")  # fmt: skip
        if num_classes is not None and box_predictor is not None:
            raise ValueError("num_classes should be None when box_predictor is specified")
        if num_classes is None and box_predictor is None:
            raise ValueError("num_classes should not be None when box_predictor is not specified")
        out_channels = backbone.out_channels
        anchors = rpn_anchor_generator or AnchorGenerator(
            ((32,), (64,), (128,), (256,), (512,)), ((0.5, 1.0, 2.0),) * 5
        )
        head = rpn_head or RPNHead(out_channels, anchors.num_anchors_per_location()[0])
        rpn = RegionProposalNetwork(
            anchors, head, rpn_fg_iou_thresh, rpn_bg_iou_thresh, rpn_batch_size_per_image, rpn_positive_fraction,
            {"training": rpn_pre_nms_top_n_train, "testing": rpn_pre_nms_top_n_test},
            {"training": rpn_post_nms_top_n_train, "testing": rpn_post_nms_top_n_test}, rpn_nms_thresh,
            score_thresh=rpn_score_thresh,
        )  # fmt: skip
        box_roi_pool = box_roi_pool or MultiScaleRoIAlign(["0", "1", "2", "3"], output_size=7, sampling_ratio=2)
        box_head = box_head or TwoMLPHead(out_channels * 7 * 7, 1024)
        box_predictor = box_predictor or FastRCNNPredictor(1024, int(num_classes))  # type: ignore[arg-type]
        roi_heads = RoIHeads(
            box_roi_pool, box_head, box_predictor, box_fg_iou_thresh, box_bg_iou_thresh, box_batch_size_per_image,
            box_positive_fraction, bbox_reg_weights, box_score_thresh, box_nms_thresh, box_detections_per_img,
        )  # fmt: skip
        transform = GeneralizedRCNNTransform(min_size, max_size, image_mean or [0.485, 0.456, 0.406],
                                             image_std or [0.229, 0.224, 0.225], **kwargs)  # fmt: skip
        super().__init__(backbone, rpn, roi_heads, transform)


FasterRCNN_ResNet50_FPN_Weights = coco_weights(
    "FasterRCNN_ResNet50_FPN_Weights", "faster_rcnn",
    "https://download.pytorch.org/models/fasterrcnn_resnet50_fpn_coco-258fb6c6.pth", 41755286, 37.0,
)  # fmt: skip


def fasterrcnn_resnet50_fpn(*, weights: Any = None, progress: bool = True, num_classes: int | None = None,
                            weights_backbone: Any = ResNet50_Weights.IMAGENET1K_V1,  # type: ignore[attr-defined]
                            trainable_backbone_layers: int | None = None, **kwargs: Any) -> FasterRCNN:  # fmt: skip
    """Faster R-CNN with a ResNet-50-FPN backbone (weights only from the local torch hub cache)."""
    return _resnet50_fpn_detector(FasterRCNN, FasterRCNN_ResNet50_FPN_Weights, weights, progress, num_classes,
                                  weights_backbone, trainable_backbone_layers, kwargs)  # fmt: skip
