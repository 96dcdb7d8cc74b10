"""`torchvision.models.segmentation.fcn` on serve: FCN, FCNHead (serve.zoo.segmentation), builders, weights."""

from __future__ import annotations

from typing import Any

from serve.compat.torchvision.models.resnet import ResNet50_Weights, ResNet101_Weights, resnet50, resnet101
from serve.compat.torchvision.models.segmentation._weights import (
    FCN_ResNet50_Weights,
    FCN_ResNet101_Weights,
    load,
    resolve,
)
from serve.zoo.segmentation import FCN, FCNHead, resnet_segmentation

__all__ = ["FCN", "FCNHead", "FCN_ResNet50_Weights", "FCN_ResNet101_Weights", "fcn_resnet50", "fcn_resnet101"]

_DILATED = [False, True, True]


def fcn_resnet50(*, weights: Any = None, progress: bool = True, num_classes: int | None = None,
                 aux_loss: bool | None = None, weights_backbone: Any = ResNet50_Weights.IMAGENET1K_V1,  # type: ignore[attr-defined]
                 **kwargs: Any) -> FCN:  # fmt: skip
    """FCN on a dilated ResNet-50 (named weights and backbone weights only from the local torch hub cache)."""
    weights, weights_backbone, num_classes, aux = resolve(
        FCN_ResNet50_Weights, weights, weights_backbone, num_classes, aux_loss, kwargs
    )
    backbone = resnet50(weights=weights_backbone, replace_stride_with_dilation=_DILATED)
    return load(resnet_segmentation("fcn", backbone, num_classes, aux), weights, progress)  # type: ignore[no-any-return]


def fcn_resnet101(*, weights: Any = None, progress: bool = True, num_classes: int | None = None,
                  aux_loss: bool | None = None, weights_backbone: Any = ResNet101_Weights.IMAGENET1K_V1,  # type: ignore[attr-defined]
                  **kwargs: Any) -> FCN:  # fmt: skip
    """FCN on a dilated ResNet-101."""
    weights, weights_backbone, num_classes, aux = resolve(
        FCN_ResNet101_Weights, weights, weights_backbone, num_classes, aux_loss, kwargs
    )
    backbone = resnet101(weights=weights_backbone, replace_stride_with_dilation=_DILATED)
    return load(resnet_segmentation("fcn", backbone, num_classes, aux), weights, progress)  # type: ignore[no-any-return]
