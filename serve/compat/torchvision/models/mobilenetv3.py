"""`torchvision.models.mobilenetv3` on serve: MobileNetV3
(definitions in serve.zoo.mobilenetv3), builders and weights enums."""

from __future__ import annotations

from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import mobilenetv3 as _zoo
from serve.zoo.mobilenetv3 import InvertedResidual, InvertedResidualConfig, MobileNetV3

MobileNet_V3_Large_Weights = weights_enum("mobilenet_v3_large", __name__)
MobileNet_V3_Small_Weights = weights_enum("mobilenet_v3_small", __name__)

mobilenet_v3_large = model_builder("mobilenet_v3_large", _zoo.mobilenet_v3_large, __name__)
mobilenet_v3_small = model_builder("mobilenet_v3_small", _zoo.mobilenet_v3_small, __name__)

__all__ = [
    "InvertedResidual",
    "InvertedResidualConfig",
    "MobileNetV3",
    "MobileNet_V3_Large_Weights",
    "MobileNet_V3_Small_Weights",
    "mobilenet_v3_large",
    "mobilenet_v3_small",
]
