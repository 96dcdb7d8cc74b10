"""`torchvision.models.detection` on serve, for inference: Faster R-CNN with a ResNet-50-FPN backbone
(`fasterrcnn_resnet50_fpn`, `FasterRCNN`, its weights enum) and the parts it is built from (AnchorGenerator,
RPN, RoIHeads, GeneralizedRCNNTransform, BackboneWithFPN), with torchvision's names and state_dict keys.
Not here: RetinaNet, SSD/SSDlite, FCOS, Mask R-CNN and Keypoint R-CNN, and training (targets and losses).
"""

from __future__ import annotations

from serve.compat.torchvision.models import _api
from serve.compat.torchvision.models.detection import (
    anchor_utils,
    backbone_utils,
    faster_rcnn,
    roi_heads,
    rpn,
    transform,
)
from serve.compat.torchvision.models.detection.faster_rcnn import (
    FasterRCNN,
    FasterRCNN_ResNet50_FPN_Weights,
    fasterrcnn_resnet50_fpn,
)

__all__ = ["FasterRCNN", "FasterRCNN_ResNet50_FPN_Weights", "anchor_utils", "backbone_utils", "faster_rcnn",
           "fasterrcnn_resnet50_fpn", "roi_heads", "rpn", "transform"]  # fmt: skip

_api._BUILDERS[fasterrcnn_resnet50_fpn.__name__] = fasterrcnn_resnet50_fpn
