"""`torchvision.models.shufflenetv2` on serve: ShuffleNet V2
(definitions in serve.zoo.shufflenetv2), builders and weights enums."""

from __future__ import annotations

from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import shufflenetv2 as _zoo
from serve.zoo.shufflenetv2 import InvertedResidual, ShuffleNetV2, channel_shuffle

ShuffleNet_V2_X0_5_Weights = weights_enum("shufflenet_v2_x0_5", __name__)
ShuffleNet_V2_X1_0_Weights = weights_enum("shufflenet_v2_x1_0", __name__)
ShuffleNet_V2_X1_5_Weights = weights_enum("shufflenet_v2_x1_5", __name__)
ShuffleNet_V2_X2_0_Weights = weights_enum("shufflenet_v2_x2_0", __name__)

shufflenet_v2_x0_5 = model_builder("shufflenet_v2_x0_5", _zoo.shufflenet_v2_x0_5, __name__)
shufflenet_v2_x1_0 = model_builder("shufflenet_v2_x1_0", _zoo.shufflenet_v2_x1_0, __name__)
shufflenet_v2_x1_5 = model_builder("shufflenet_v2_x1_5", _zoo.shufflenet_v2_x1_5, __name__)
shufflenet_v2_x2_0 = model_builder("shufflenet_v2_x2_0", _zoo.shufflenet_v2_x2_0, __name__)

__all__ = [
    "InvertedResidual",
    "ShuffleNetV2",
    "ShuffleNet_V2_X0_5_Weights",
    "ShuffleNet_V2_X1_0_Weights",
    "ShuffleNet_V2_X1_5_Weights",
    "ShuffleNet_V2_X2_0_Weights",
    "channel_shuffle",
    "shufflenet_v2_x0_5",
    "shufflenet_v2_x1_0",
    "shufflenet_v2_x1_5",
    "shufflenet_v2_x2_0",
]
