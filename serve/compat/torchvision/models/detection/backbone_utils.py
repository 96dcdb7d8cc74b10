"""`torchvision.models.detection.backbone_utils`: a ResNet body (IntermediateLayerGetter) with an FPN on top.

Layers layer1..layer4 (as "0".."3") feed FeaturePyramidNetwork(256 channels) plus LastLevelMaxPool ("pool").
`trainable_layers` only matters for training (which layers torchvision freezes); it is validated and recorded.
`resnet_fpn_backbone(backbone_name=..., weights=...)` is torchvision's public builder of the same thing (the one
TorchServe's Faster R-CNN example imports), FrozenBatchNorm2d by default as torchvision's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import serve
from serve import nn
from serve.compat.torchvision.models import resnet
from serve.zoo.fpn import ExtraFPNBlock, FeaturePyramidNetwork, LastLevelMaxPool
from serve.zoo.frozen_bn import FrozenBatchNorm2d
from serve.zoo.segmentation import IntermediateLayerGetter


class BackboneWithFPN(nn.Module):
    def __init__(self, backbone: nn.Module, return_layers: dict[str, str], in_channels_list: list[int],
                 out_channels: int, extra_blocks: ExtraFPNBlock | None = None,
                 norm_layer: Callable[..., nn.Module] | None = None) -> None:  # fmt: skip
        super().__init__()
        self.body = IntermediateLayerGetter(backbone, return_layers=return_layers)
        self.fpn = FeaturePyramidNetwork(in_channels_list, out_channels, extra_blocks or LastLevelMaxPool(),
                                         norm_layer)  # fmt: skip
        self.out_channels = out_channels

    def forward(self, x: serve.Tensor) -> OrderedDict[str, serve.Tensor]:
        return self.fpn(self.body(x))


_RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnext50_32x4d", "resnext101_32x8d",
            "resnext101_64x4d", "wide_resnet50_2", "wide_resnet101_2")  # fmt: skip


def resnet_fpn_backbone(*legacy: Any, backbone_name: str | None = None, weights: Any = None,
                        norm_layer: Callable[..., nn.Module] = FrozenBatchNorm2d, trainable_layers: int = 3,
                        returned_layers: list[int] | None = None,
                        extra_blocks: ExtraFPNBlock | None = None) -> BackboneWithFPN:  # fmt: skip
    """The named ResNet (weights None or its enum) under an FPN, with torchvision's arguments and keys.

    torchvision's keyword form, and also its pre-0.13 positional one, `resnet_fpn_backbone('resnet50', True)`, which
    TorchServe's Faster R-CNN example still calls: (backbone_name, pretrained), the legacy `pretrained` taken as the
    ResNet builders take it (torchvision's IMAGENET1K_V1 file from the local hub cache; an error naming it when it
    is not there)."""
    if len(legacy) > 2:
        raise TypeError("resnet_fpn_backbone: at most (backbone_name, pretrained) positionally; pass the rest by name")
    name = legacy[0] if legacy else backbone_name
    if name not in _RESNETS:
        raise ValueError(f"resnet_fpn_backbone: backbone_name must be one of {', '.join(_RESNETS)}, got {name!r}")
    build = getattr(resnet, name)
    if len(legacy) == 2:
        backbone = build(pretrained=bool(legacy[1]), norm_layer=norm_layer)
    else:
        backbone = build(weights=weights, norm_layer=norm_layer)
    return _resnet_fpn_extractor(backbone, trainable_layers, returned_layers, extra_blocks)


def _resnet_fpn_extractor(backbone: nn.Module, trainable_layers: int, returned_layers: list[int] | None = None,
                          extra_blocks: ExtraFPNBlock | None = None,
                          norm_layer: Callable[..., nn.Module] | None = None) -> BackboneWithFPN:  # fmt: skip
    if not 0 <= trainable_layers <= 5:
        raise ValueError(f"Trainable layers should be in the range [0,5], got {trainable_layers}")
    returned_layers = returned_layers or [1, 2, 3, 4]
    if min(returned_layers) <= 0 or max(returned_layers) >= 5:
        raise ValueError(f"Each returned layer should be in the range [1,4]. Got {returned_layers}")
    return_layers = {f"layer{k}": str(v) for v, k in enumerate(returned_layers)}
    stage2 = backbone.inplanes // 8  # type: ignore[operator]
    in_channels_list = [stage2 * 2 ** (i - 1) for i in returned_layers]
    return BackboneWithFPN(backbone, return_layers, in_channels_list, 256, extra_blocks, norm_layer)


def _validate_trainable_layers(is_trained: bool, trainable_backbone_layers: int | None, max_value: int,
                               default_value: int) -> int:  # fmt: skip
    if not is_trained:
        return max_value
    return default_value if trainable_backbone_layers is None else trainable_backbone_layers


def _resnet50_fpn_detector(model_class: Callable[..., nn.Module], weights_enum: Any, weights: Any, progress: bool,
                           num_classes: int | None, weights_backbone: Any, trainable_backbone_layers: int | None,
                           kwargs: dict[str, Any], **extractor: Any) -> Any:  # fmt: skip
    """What torchvision's `*_resnet50_fpn` builders share: the COCO weights (which fix num_classes and drop the
    backbone's), the trainable layers, a ResNet-50 with frozen batch norm when trained, its FPN (`extractor`: the
    returned layers and extra blocks), the model, then the weights loaded."""
    from serve.compat.torchvision.models._utils import _ovewrite_value_param

    weights = weights_enum.verify(weights)
    if weights is not None:
        weights_backbone = None
        num_classes = _ovewrite_value_param("num_classes", num_classes, len(weights.meta["categories"]))
    elif num_classes is None:
        num_classes = 91
    is_trained = weights is not None or weights_backbone is not None
    trainable = _validate_trainable_layers(is_trained, trainable_backbone_layers, 5, 3)
    norm_layer = FrozenBatchNorm2d if is_trained else nn.BatchNorm2d
    backbone = resnet.resnet50(weights=weights_backbone, progress=progress, norm_layer=norm_layer)
    model = model_class(_resnet_fpn_extractor(backbone, trainable, **extractor), num_classes=num_classes, **kwargs)
    if weights is not None:
        model.load_state_dict(weights.get_state_dict(progress=progress))
    return model
