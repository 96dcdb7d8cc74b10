"""`torchvision.models.segmentation.deeplabv3` on serve: DeepLabV3 and its heads (serve.zoo.segmentation),
builders on ResNet-50/101 and MobileNetV3-Large, weights."""

from __future__ import annotations

from typing import Any

from serve.compat.torchvision.models.mobilenetv3 import MobileNet_V3_Large_Weights, mobilenet_v3_large
from serve.compat.torchvision.models.resnet import ResNet50_Weights, ResNet101_Weights, resnet50, resnet101
from serve.compat.torchvision.models.segmentation._weights import (
    DeepLabV3_MobileNet_V3_Large_Weights,
    DeepLabV3_ResNet50_Weights,
    DeepLabV3_ResNet101_Weights,
    load,
    resolve,
)
from serve.zoo.segmentation import (
    ASPP,
    ASPPConv,
    ASPPPooling,
    DeepLabHead,
    DeepLabV3,
    mobilenet_deeplabv3,
    resnet_segmentation,
)

__all__ = ["ASPP", "ASPPConv", "ASPPPooling", "DeepLabHead", "DeepLabV3", "DeepLabV3_MobileNet_V3_Large_Weights",
           "DeepLabV3_ResNet50_Weights", "DeepLabV3_ResNet101_Weights", "deeplabv3_mobilenet_v3_large",
           "deeplabv3_resnet50", "deeplabv3_resnet101"]  # fmt: skip

_DILATED = [False, True, True]


def deeplabv3_resnet50(*, weights: Any = None, progress: bool = True, num_classes: int | None = None,
                       aux_loss: bool | None = None, weights_backbone: Any = ResNet50_Weights.IMAGENET1K_V1,  # type: ignore[attr-defined]
                       **kwargs: Any) -> DeepLabV3:  # fmt: skip
    """DeepLabV3 on a dilated ResNet-50."""
    weights, weights_backbone, num_classes, aux = resolve(
        DeepLabV3_ResNet50_Weights, weights, weights_backbone, num_classes, aux_loss, kwargs
    )
    backbone = resnet50(weights=weights_backbone, replace_stride_with_dilation=_DILATED)
    return load(resnet_segmentation("deeplabv3", backbone, num_classes, aux), weights, progress)  # type: ignore[no-any-return]


def deeplabv3_resnet101(*, weights: Any = None, progress: bool = True, num_classes: int | None = None,
                        aux_loss: bool | None = None, weights_backbone: Any = ResNet101_Weights.IMAGENET1K_V1,  # type: ignore[attr-defined]
                        **kwargs: Any) -> DeepLabV3:  # fmt: skip
    """DeepLabV3 on a dilated ResNet-101."""
    weights, weights_backbone, num_classes, aux = resolve(
        DeepLabV3_ResNet101_Weights, weights, weights_backbone, num_classes, aux_loss, kwargs
    )
    backbone = resnet101(weights=weights_backbone, replace_stride_with_dilation=_DILATED)
    return load(resnet_segmentation("deeplabv3", backbone, num_classes, aux), weights, progress)  # type: ignore[no-any-return]


def deeplabv3_mobilenet_v3_large(*, weights: Any = None, progress: bool = True, num_classes: int | None = None,
                                 aux_loss: bool | None = None,
                                 weights_backbone: Any = MobileNet_V3_Large_Weights.IMAGENET1K_V1,  # type: ignore[attr-defined]
                                 **kwargs: Any) -> DeepLabV3:  # fmt: skip
    """DeepLabV3 on a dilated MobileNetV3-Large."""
    weights, weights_backbone, num_classes, aux = resolve(
        DeepLabV3_MobileNet_V3_Large_Weights, weights, weights_backbone, num_classes, aux_loss, kwargs
    )
    backbone = mobilenet_v3_large(weights=weights_backbone, dilated=True)
    return load(mobilenet_deeplabv3(backbone, num_classes, aux), weights, progress)  # type: ignore[no-any-return]
