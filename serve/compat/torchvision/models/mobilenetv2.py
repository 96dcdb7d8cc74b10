"""`torchvision.models.mobilenetv2` on serve: MobileNetV2
(definitions in serve.zoo.mobilenet), builders and weights enums."""

from __future__ import annotations

from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import mobilenet as _zoo
from serve.zoo.mobilenet import InvertedResidual, MobileNetV2

MobileNet_V2_Weights = weights_enum("mobilenet_v2", __name__)

mobilenet_v2 = model_builder("mobilenet_v2", _zoo.mobilenet_v2, __name__)

__all__ = ["InvertedResidual", "MobileNetV2", "MobileNet_V2_Weights", "mobilenet_v2"]
