"""`torchvision.models.segmentation` on serve: FCN, DeepLabV3 and LR-ASPP with torchvision's builders, weights
enums and state_dict keys (definitions in serve.zoo.segmentation). Builders follow torchvision's arguments:
`weights` (COCO_WITH_VOC_LABELS_V1, 21 classes, with the auxiliary head), `weights_backbone` (ImageNet weights
for the backbone by default, read from the local torch hub cache: pass `weights_backbone=None` for none),
`num_classes`, `aux_loss`. Importing this package registers the builders for `models.get_model` /
`list_models`; `get_model_weights`/`get_weight` know only the classification tables.
"""

from __future__ import annotations

from serve.compat.torchvision.models import _api
from serve.compat.torchvision.models.segmentation import deeplabv3, fcn, lraspp
from serve.compat.torchvision.models.segmentation._weights import SemanticSegmentation
from serve.compat.torchvision.models.segmentation.deeplabv3 import (
    DeepLabV3,
    DeepLabV3_MobileNet_V3_Large_Weights,
    DeepLabV3_ResNet50_Weights,
    DeepLabV3_ResNet101_Weights,
    deeplabv3_mobilenet_v3_large,
    deeplabv3_resnet50,
    deeplabv3_resnet101,
)
from serve.compat.torchvision.models.segmentation.fcn import (
    FCN,
    FCN_ResNet50_Weights,
    FCN_ResNet101_Weights,
    fcn_resnet50,
    fcn_resnet101,
)
from serve.compat.torchvision.models.segmentation.lraspp import (
    LRASPP,
    LRASPP_MobileNet_V3_Large_Weights,
    lraspp_mobilenet_v3_large,
)

__all__ = ["FCN", "LRASPP", "DeepLabV3", "DeepLabV3_MobileNet_V3_Large_Weights", "DeepLabV3_ResNet50_Weights",
           "DeepLabV3_ResNet101_Weights", "FCN_ResNet50_Weights", "FCN_ResNet101_Weights",
           "LRASPP_MobileNet_V3_Large_Weights", "SemanticSegmentation", "deeplabv3", "deeplabv3_mobilenet_v3_large",
           "deeplabv3_resnet50", "deeplabv3_resnet101", "fcn", "fcn_resnet50", "fcn_resnet101", "lraspp",
           "lraspp_mobilenet_v3_large"]  # fmt: skip

for _builder in (fcn_resnet50, fcn_resnet101, deeplabv3_resnet50, deeplabv3_resnet101, deeplabv3_mobilenet_v3_large,
                 lraspp_mobilenet_v3_large):  # fmt: skip
    _api._BUILDERS[_builder.__name__] = _builder
