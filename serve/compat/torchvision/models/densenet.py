"""`torchvision.models.densenet` on serve: DenseNet (definitions in serve.zoo.densenet), builders and weights enums."""

from __future__ import annotations

from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import densenet as _zoo
from serve.zoo.densenet import DenseNet, remap_legacy_keys

DenseNet121_Weights = weights_enum("densenet121", __name__)
DenseNet161_Weights = weights_enum("densenet161", __name__)
DenseNet169_Weights = weights_enum("densenet169", __name__)
DenseNet201_Weights = weights_enum("densenet201", __name__)

densenet121 = model_builder("densenet121", _zoo.densenet121, __name__, remap=remap_legacy_keys)
densenet161 = model_builder("densenet161", _zoo.densenet161, __name__, remap=remap_legacy_keys)
densenet169 = model_builder("densenet169", _zoo.densenet169, __name__, remap=remap_legacy_keys)
densenet201 = model_builder("densenet201", _zoo.densenet201, __name__, remap=remap_legacy_keys)

__all__ = [
    "DenseNet",
    "DenseNet121_Weights",
    "DenseNet161_Weights",
    "DenseNet169_Weights",
    "DenseNet201_Weights",
    "densenet121",
    "densenet161",
    "densenet169",
    "densenet201",
]
