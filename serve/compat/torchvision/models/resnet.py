"""`torchvision.models.resnet` on serve: ResNet, ResNeXt and Wide ResNet
(definitions in serve.zoo.resnet), builders and weights enums."""

from __future__ import annotations

from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import resnet as _zoo
from serve.zoo.resnet import BasicBlock, Bottleneck, ResNet, conv1x1, conv3x3

ResNet18_Weights = weights_enum("resnet18", __name__)
ResNet34_Weights = weights_enum("resnet34", __name__)
ResNet50_Weights = weights_enum("resnet50", __name__)
ResNet101_Weights = weights_enum("resnet101", __name__)
ResNet152_Weights = weights_enum("resnet152", __name__)
ResNeXt50_32X4D_Weights = weights_enum("resnext50_32x4d", __name__)
ResNeXt101_32X8D_Weights = weights_enum("resnext101_32x8d", __name__)
ResNeXt101_64X4D_Weights = weights_enum("resnext101_64x4d", __name__)
Wide_ResNet50_2_Weights = weights_enum("wide_resnet50_2", __name__)
Wide_ResNet101_2_Weights = weights_enum("wide_resnet101_2", __name__)

resnet18 = model_builder("resnet18", _zoo.resnet18, __name__)
resnet34 = model_builder("resnet34", _zoo.resnet34, __name__)
resnet50 = model_builder("resnet50", _zoo.resnet50, __name__)
resnet101 = model_builder("resnet101", _zoo.resnet101, __name__)
resnet152 = model_builder("resnet152", _zoo.resnet152, __name__)
resnext50_32x4d = model_builder("resnext50_32x4d", _zoo.resnext50_32x4d, __name__)
resnext101_32x8d = model_builder("resnext101_32x8d", _zoo.resnext101_32x8d, __name__)
resnext101_64x4d = model_builder("resnext101_64x4d", _zoo.resnext101_64x4d, __name__)
wide_resnet50_2 = model_builder("wide_resnet50_2", _zoo.wide_resnet50_2, __name__)
wide_resnet101_2 = model_builder("wide_resnet101_2", _zoo.wide_resnet101_2, __name__)

__all__ = [
    "BasicBlock",
    "Bottleneck",
    "ResNeXt50_32X4D_Weights",
    "ResNeXt101_32X8D_Weights",
    "ResNeXt101_64X4D_Weights",
    "ResNet",
    "ResNet18_Weights",
    "ResNet34_Weights",
    "ResNet50_Weights",
    "ResNet101_Weights",
    "ResNet152_Weights",
    "Wide_ResNet50_2_Weights",
    "Wide_ResNet101_2_Weights",
    "conv1x1",
    "conv3x3",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "resnext50_32x4d",
    "resnext101_32x8d",
    "resnext101_64x4d",
    "wide_resnet50_2",
    "wide_resnet101_2",
]
