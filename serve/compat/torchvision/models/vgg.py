"""`torchvision.models.vgg` on serve: VGG (definitions in serve.zoo.vgg), builders and weights enums."""

from __future__ import annotations

from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import vgg as _zoo
from serve.zoo.vgg import VGG, cfgs, make_layers

VGG11_Weights = weights_enum("vgg11", __name__)
VGG11_BN_Weights = weights_enum("vgg11_bn", __name__)
VGG13_Weights = weights_enum("vgg13", __name__)
VGG13_BN_Weights = weights_enum("vgg13_bn", __name__)
VGG16_Weights = weights_enum("vgg16", __name__)
VGG16_BN_Weights = weights_enum("vgg16_bn", __name__)
VGG19_Weights = weights_enum("vgg19", __name__)
VGG19_BN_Weights = weights_enum("vgg19_bn", __name__)

vgg11 = model_builder("vgg11", _zoo.vgg11, __name__)
vgg11_bn = model_builder("vgg11_bn", _zoo.vgg11_bn, __name__)
vgg13 = model_builder("vgg13", _zoo.vgg13, __name__)
vgg13_bn = model_builder("vgg13_bn", _zoo.vgg13_bn, __name__)
vgg16 = model_builder("vgg16", _zoo.vgg16, __name__)
vgg16_bn = model_builder("vgg16_bn", _zoo.vgg16_bn, __name__)
vgg19 = model_builder("vgg19", _zoo.vgg19, __name__)
vgg19_bn = model_builder("vgg19_bn", _zoo.vgg19_bn, __name__)

__all__ = [
    "VGG",
    "VGG11_BN_Weights",
    "VGG11_Weights",
    "VGG13_BN_Weights",
    "VGG13_Weights",
    "VGG16_BN_Weights",
    "VGG16_Weights",
    "VGG19_BN_Weights",
    "VGG19_Weights",
    "cfgs",
    "make_layers",
    "vgg11",
    "vgg11_bn",
    "vgg13",
    "vgg13_bn",
    "vgg16",
    "vgg16_bn",
    "vgg19",
    "vgg19_bn",
]
