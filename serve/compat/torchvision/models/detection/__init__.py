"""`torchvision.models.detection` on serve, for inference: Faster R-CNN, Mask R-CNN and RetinaNet with a
ResNet-50-FPN backbone and SSDlite on MobileNetV3-Large (`fasterrcnn_resnet50_fpn`, `maskrcnn_resnet50_fpn`,
`retinanet_resnet50_fpn`, `ssdlite320_mobilenet_v3_large`, their classes and weights enums) and the parts they are
built from (AnchorGenerator, DefaultBoxGenerator, RPN, RoIHeads, GeneralizedRCNNTransform, BackboneWithFPN), with
torchvision's names and state_dict keys. Not here: the v2 and MobileNet Faster R-CNN variants, ssd300_vgg16,
FCOS, Keypoint R-CNN, and training (targets and losses).
"""

from __future__ import annotations

from serve.compat.torchvision.models import _api
from serve.compat.torchvision.models.detection import (
    anchor_utils,
    backbone_utils,
    faster_rcnn,
    mask_rcnn,
    roi_heads,
    rpn,
    ssd,
    ssdlite,
    transform,
)
from serve.compat.torchvision.models.detection.faster_rcnn import (
    FasterRCNN,
    FasterRCNN_ResNet50_FPN_Weights,
    fasterrcnn_resnet50_fpn,
)
from serve.compat.torchvision.models.detection.mask_rcnn import (
    MaskRCNN,
    MaskRCNN_ResNet50_FPN_Weights,
    maskrcnn_resnet50_fpn,
)
from serve.compat.torchvision.models.detection.retinanet import (
    RetinaNet,
    RetinaNet_ResNet50_FPN_Weights,
    retinanet_resnet50_fpn,
)
from serve.compat.torchvision.models.detection.ssd import SSD
from serve.compat.torchvision.models.detection.ssdlite import (
    SSDLite320_MobileNet_V3_Large_Weights,
    ssdlite320_mobilenet_v3_large,
)

__all__ = [
    "SSD",
    "FasterRCNN",
    "FasterRCNN_ResNet50_FPN_Weights",
    "MaskRCNN",
    "MaskRCNN_ResNet50_FPN_Weights",
    "RetinaNet",
    "RetinaNet_ResNet50_FPN_Weights",
    "SSDLite320_MobileNet_V3_Large_Weights",
    "anchor_utils",
    "backbone_utils",
    "faster_rcnn",
    "fasterrcnn_resnet50_fpn",
    "mask_rcnn",
    "maskrcnn_resnet50_fpn",
    "retinanet",
    "retinanet_resnet50_fpn",
    "roi_heads",
    "rpn",
    "ssd",
    "ssdlite",
    "ssdlite320_mobilenet_v3_large",
    "transform",
]

for _builder in (fasterrcnn_resnet50_fpn, maskrcnn_resnet50_fpn, retinanet_resnet50_fpn, ssdlite320_mobilenet_v3_large):
    _api._BUILDERS[_builder.__name__] = _builder
