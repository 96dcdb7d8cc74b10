"""`torchvision.models.alexnet` on serve: AlexNet (definitions in serve.zoo.alexnet), builders and weights enums."""

from __future__ import annotations

from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import alexnet as _zoo
from serve.zoo.alexnet import AlexNet

AlexNet_Weights = weights_enum("alexnet", __name__)

alexnet = model_builder("alexnet", _zoo.alexnet, __name__)

__all__ = ["AlexNet", "AlexNet_Weights", "alexnet"]
