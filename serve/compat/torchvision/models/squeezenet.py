"""`torchvision.models.squeezenet` on serve: SqueezeNet
(definitions in serve.zoo.squeezenet), builders and weights enums."""

from __future__ import annotations

from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import squeezenet as _zoo
from serve.zoo.squeezenet import Fire, SqueezeNet

SqueezeNet1_0_Weights = weights_enum("squeezenet1_0", __name__)
SqueezeNet1_1_Weights = weights_enum("squeezenet1_1", __name__)

squeezenet1_0 = model_builder("squeezenet1_0", _zoo.squeezenet1_0, __name__)
squeezenet1_1 = model_builder("squeezenet1_1", _zoo.squeezenet1_1, __name__)

__all__ = ["Fire", "SqueezeNet", "SqueezeNet1_0_Weights", "SqueezeNet1_1_Weights", "squeezenet1_0", "squeezenet1_1"]
