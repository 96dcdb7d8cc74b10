"""`torchvision.models.inception` on serve: Inception v3
(definitions in serve.zoo.inception), builders and weights enums."""

from __future__ import annotations

from serve.compat.torchvision.models._adjust import drop_aux, needs_aux
from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import inception as _zoo
from serve.zoo.inception import (
    BasicConv2d,
    Inception3,
    InceptionA,
    InceptionAux,
    InceptionB,
    InceptionC,
    InceptionD,
    InceptionE,
    InceptionOutputs,
)

Inception_V3_Weights = weights_enum("inception_v3", __name__)

inception_v3 = model_builder("inception_v3", _zoo.inception_v3, __name__, prepare=needs_aux, finish=drop_aux)

__all__ = [
    "BasicConv2d",
    "Inception3",
    "InceptionA",
    "InceptionAux",
    "InceptionB",
    "InceptionC",
    "InceptionD",
    "InceptionE",
    "InceptionOutputs",
    "Inception_V3_Weights",
    "inception_v3",
]
