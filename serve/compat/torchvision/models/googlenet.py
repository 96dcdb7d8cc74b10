"""`torchvision.models.googlenet` on serve: GoogLeNet
(definitions in serve.zoo.googlenet), builders and weights enums."""

from __future__ import annotations

from serve.compat.torchvision.models._adjust import drop_aux, needs_aux
from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import googlenet as _zoo
from serve.zoo.googlenet import BasicConv2d, GoogLeNet, GoogLeNetOutputs, Inception, InceptionAux

GoogLeNet_Weights = weights_enum("googlenet", __name__)

googlenet = model_builder("googlenet", _zoo.googlenet, __name__, prepare=needs_aux, finish=drop_aux)

__all__ = [
    "BasicConv2d",
    "GoogLeNet",
    "GoogLeNetOutputs",
    "GoogLeNet_Weights",
    "Inception",
    "InceptionAux",
    "googlenet",
]
