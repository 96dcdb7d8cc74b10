"""`torchvision.models.efficientnet` on serve: EfficientNet and EfficientNetV2
(definitions in serve.zoo.efficientnet), builders and weights enums."""

from __future__ import annotations

from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import efficientnet as _zoo
from serve.zoo.efficientnet import EfficientNet, FusedMBConv, FusedMBConvConfig, MBConv, MBConvConfig

EfficientNet_B0_Weights = weights_enum("efficientnet_b0", __name__)
EfficientNet_B1_Weights = weights_enum("efficientnet_b1", __name__)
EfficientNet_B2_Weights = weights_enum("efficientnet_b2", __name__)
EfficientNet_B3_Weights = weights_enum("efficientnet_b3", __name__)
EfficientNet_B4_Weights = weights_enum("efficientnet_b4", __name__)
EfficientNet_B5_Weights = weights_enum("efficientnet_b5", __name__)
EfficientNet_B6_Weights = weights_enum("efficientnet_b6", __name__)
EfficientNet_B7_Weights = weights_enum("efficientnet_b7", __name__)
EfficientNet_V2_S_Weights = weights_enum("efficientnet_v2_s", __name__)
EfficientNet_V2_M_Weights = weights_enum("efficientnet_v2_m", __name__)
EfficientNet_V2_L_Weights = weights_enum("efficientnet_v2_l", __name__)

efficientnet_b0 = model_builder("efficientnet_b0", _zoo.efficientnet_b0, __name__)
efficientnet_b1 = model_builder("efficientnet_b1", _zoo.efficientnet_b1, __name__)
efficientnet_b2 = model_builder("efficientnet_b2", _zoo.efficientnet_b2, __name__)
efficientnet_b3 = model_builder("efficientnet_b3", _zoo.efficientnet_b3, __name__)
efficientnet_b4 = model_builder("efficientnet_b4", _zoo.efficientnet_b4, __name__)
efficientnet_b5 = model_builder("efficientnet_b5", _zoo.efficientnet_b5, __name__)
efficientnet_b6 = model_builder("efficientnet_b6", _zoo.efficientnet_b6, __name__)
efficientnet_b7 = model_builder("efficientnet_b7", _zoo.efficientnet_b7, __name__)
efficientnet_v2_s = model_builder("efficientnet_v2_s", _zoo.efficientnet_v2_s, __name__)
efficientnet_v2_m = model_builder("efficientnet_v2_m", _zoo.efficientnet_v2_m, __name__)
efficientnet_v2_l = model_builder("efficientnet_v2_l", _zoo.efficientnet_v2_l, __name__)

__all__ = [
    "EfficientNet",
    "EfficientNet_B0_Weights",
    "EfficientNet_B1_Weights",
    "EfficientNet_B2_Weights",
    "EfficientNet_B3_Weights",
    "EfficientNet_B4_Weights",
    "EfficientNet_B5_Weights",
    "EfficientNet_B6_Weights",
    "EfficientNet_B7_Weights",
    "EfficientNet_V2_L_Weights",
    "EfficientNet_V2_M_Weights",
    "EfficientNet_V2_S_Weights",
    "FusedMBConv",
    "FusedMBConvConfig",
    "MBConv",
    "MBConvConfig",
    "efficientnet_b0",
    "efficientnet_b1",
    "efficientnet_b2",
    "efficientnet_b3",
    "efficientnet_b4",
    "efficientnet_b5",
    "efficientnet_b6",
    "efficientnet_b7",
    "efficientnet_v2_l",
    "efficientnet_v2_m",
    "efficientnet_v2_s",
]
