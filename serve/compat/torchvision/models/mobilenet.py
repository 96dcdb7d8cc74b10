"""`torchvision.models.mobilenet` on serve: MobileNetV2 and MobileNetV3 together, as torchvision's module."""

from __future__ import annotations

from serve.compat.torchvision.models.mobilenetv2 import MobileNet_V2_Weights, MobileNetV2, mobilenet_v2
from serve.compat.torchvision.models.mobilenetv3 import (
    MobileNet_V3_Large_Weights,
    MobileNet_V3_Small_Weights,
    MobileNetV3,
    mobilenet_v3_large,
    mobilenet_v3_small,
)

__all__ = ["MobileNetV2", "MobileNetV3", "MobileNet_V2_Weights", "MobileNet_V3_Large_Weights",
           "MobileNet_V3_Small_Weights", "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small"]  # fmt: skip
