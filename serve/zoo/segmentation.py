"""Semantic segmentation heads and models as `torchvision.models.segmentation`: FCN (Long et al., 2015),
DeepLabV3 (Chen et al., 2017) and LR-ASPP (Howard et al., 2019), on the zoo's ResNet and MobileNetV3 backbones.

Each model is a backbone wrapped in `IntermediateLayerGetter` (the backbone's own child modules, so keys stay
`backbone.layer4.0.conv1.weight`), a `classifier` head on the last stage and, when asked, an `aux_classifier` on
an earlier one; the logits are upsampled bilinearly to the input size and returned in a dict: {"out": ..,
"aux": ..}. ResNet backbones replace the strides of layer3 and layer4 with dilation (output stride 8);
MobileNetV3 ones are built `dilated=True`. Head layout and keys follow torchvision's:
- FCNHead: 3x3 conv to in/4 channels, BN, ReLU, Dropout(0.1), 1x1 conv (`classifier.0/1/4`);
- DeepLabHead: ASPP (a 1x1 branch, three 3x3 atrous branches, image pooling; concatenated and projected),
  3x3 conv, BN, ReLU, 1x1 conv (`classifier.0.convs.N`, `classifier.0.project`, `classifier.1/2/4`);
- LRASPPHead: 1x1 conv-BN-ReLU on the high-level features gated by a pooled sigmoid branch, upsampled to the
  low-level features and added to their own 1x1 classifier (`classifier.cbr`, `.scale`, `.low_classifier`,
  `.high_classifier`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import serve
import serve.nn.functional as F
from serve import nn
from serve.zoo import mobilenetv3, resnet


class IntermediateLayerGetter(nn.ModuleDict):
    """The model's children up to the last one named in `return_layers`; forward returns {new name: output}."""

    def __init__(self, model: nn.Module, return_layers: dict[str, str]) -> None:
        names = {name for name, _ in model.named_children()}
        if not set(return_layers).issubset(names):
            raise ValueError(
                f"return_layers {sorted(return_layers)} are not all children of the model ({sorted(names)})"
            )
        wanted = dict(return_layers)
        layers: OrderedDict[str, nn.Module] = OrderedDict()
        for name, module in model.named_children():
            layers[name] = module
            wanted.pop(name, None)
            if not wanted:
                break
        super().__init__(layers)
        self.return_layers = dict(return_layers)

    def forward(self, x: serve.Tensor) -> OrderedDict[str, serve.Tensor]:
        out: OrderedDict[str, serve.Tensor] = OrderedDict()
        for name, module in self.items():
            x = module(x)
            if name in self.return_layers:
                out[self.return_layers[name]] = x
        return out


def _upsample(x: serve.Tensor, size: Sequence[int]) -> serve.Tensor:
    return F.interpolate(x, size=tuple(size), mode="bilinear", align_corners=False)


class _SimpleSegmentationModel(nn.Module):
    """backbone -> classifier (and aux_classifier), each upsampled to the input's size."""

    def __init__(self, backbone: nn.Module, classifier: nn.Module, aux_classifier: nn.Module | None = None) -> None:
        super().__init__()
        self.backbone = backbone
        self.classifier = classifier
        self.aux_classifier = aux_classifier

    def forward(self, x: serve.Tensor) -> OrderedDict[str, serve.Tensor]:
        size = x.shape[-2:]
        features = self.backbone(x)
        result: OrderedDict[str, serve.Tensor] = OrderedDict()
        result["out"] = _upsample(self.classifier(features["out"]), size)  # (N, classes, H, W)
        if self.aux_classifier is not None:
            result["aux"] = _upsample(self.aux_classifier(features["aux"]), size)
        return result


class FCN(_SimpleSegmentationModel):
    pass


class DeepLabV3(_SimpleSegmentationModel):
    pass


class FCNHead(nn.Sequential):
    def __init__(self, in_channels: int, channels: int) -> None:
        inter = in_channels // 4
        super().__init__(
            nn.Conv2d(in_channels, inter, 3, padding=1, bias=False),
            nn.BatchNorm2d(inter),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Conv2d(inter, channels, 1),
        )


class ASPPConv(nn.Sequential):
    def __init__(self, in_channels: int, out_channels: int, dilation: int) -> None:
        super().__init__(
            nn.Conv2d(in_channels, out_channels, 3, padding=dilation, dilation=dilation, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(),
        )


class ASPPPooling(nn.Sequential):
    """Image-level features: global average pool, 1x1 conv-BN-ReLU, upsampled back to the input's size."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__(
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(in_channels, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(),
        )

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        size = x.shape[-2:]
        for module in self:
            x = module(x)
        return _upsample(x, size)


class ASPP(nn.Module):
    """Atrous spatial pyramid pooling: parallel branches concatenated on channels, projected to out_channels."""

    def __init__(self, in_channels: int, atrous_rates: Sequence[int], out_channels: int = 256) -> None:
        super().__init__()
        branches: list[nn.Module] = [
            nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, bias=False), nn.BatchNorm2d(out_channels), nn.ReLU())
        ]
        branches += [ASPPConv(in_channels, out_channels, rate) for rate in atrous_rates]
        branches.append(ASPPPooling(in_channels, out_channels))
        self.convs = nn.ModuleList(branches)
        self.project = nn.Sequential(
            nn.Conv2d(len(branches) * out_channels, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(),
            nn.Dropout(0.5),
        )

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return self.project(serve.cat([conv(x) for conv in self.convs], dim=1))  # (N, branches * out, H, W)


class DeepLabHead(nn.Sequential):
    def __init__(self, in_channels: int, num_classes: int, atrous_rates: Sequence[int] = (12, 24, 36)) -> None:
        super().__init__(
            ASPP(in_channels, atrous_rates),
            nn.Conv2d(256, 256, 3, padding=1, bias=False),
            nn.BatchNorm2d(256),
            nn.ReLU(),
            nn.Conv2d(256, num_classes, 1),
        )


class LRASPPHead(nn.Module):
    def __init__(self, low_channels: int, high_channels: int, num_classes: int, inter_channels: int) -> None:
        super().__init__()
        self.cbr = nn.Sequential(
            nn.Conv2d(high_channels, inter_channels, 1, bias=False),
            nn.BatchNorm2d(inter_channels),
            nn.ReLU(inplace=True),
        )
        self.scale = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Conv2d(high_channels, inter_channels, 1, bias=False), nn.Sigmoid()
        )
        self.low_classifier = nn.Conv2d(low_channels, num_classes, 1)
        self.high_classifier = nn.Conv2d(inter_channels, num_classes, 1)

    def forward(self, input: dict[str, serve.Tensor]) -> serve.Tensor:
        low, high = input["low"], input["high"]
        x = self.cbr(high) * self.scale(high)  # (N, inter, h, w) gated by (N, inter, 1, 1)
        x = _upsample(x, low.shape[-2:])
        return self.low_classifier(low) + self.high_classifier(x)


class LRASPP(nn.Module):
    """Lite R-ASPP: one head on the low- and high-level features; returns {"out": logits at the input's size}."""

    def __init__(self, backbone: nn.Module, low_channels: int, high_channels: int, num_classes: int,
                 inter_channels: int = 128) -> None:  # fmt: skip
        super().__init__()
        self.backbone = backbone
        self.classifier = LRASPPHead(low_channels, high_channels, num_classes, inter_channels)

    def forward(self, input: serve.Tensor) -> OrderedDict[str, serve.Tensor]:
        out = _upsample(self.classifier(self.backbone(input)), input.shape[-2:])
        return OrderedDict([("out", out)])


# -- assembling backbones and heads (the builders in serve.compat.torchvision.models.segmentation add weights) --
def dilated_resnet(depth: int, **kwargs: Any) -> resnet.ResNet:
    """resnet50/101 with layer3 and layer4 dilated instead of strided (output stride 8)."""
    build = {50: resnet.resnet50, 101: resnet.resnet101}[depth]
    return build(replace_stride_with_dilation=[False, True, True], **kwargs)


def resnet_segmentation(kind: str, backbone: resnet.ResNet, num_classes: int, aux: bool) -> nn.Module:
    """FCN or DeepLabV3 on a dilated ResNet: the head on layer4 (2048 channels), aux FCNHead on layer3 (1024)."""
    return_layers = {"layer4": "out", **({"layer3": "aux"} if aux else {})}
    body = IntermediateLayerGetter(backbone, return_layers)
    aux_head = FCNHead(1024, num_classes) if aux else None
    if kind == "fcn":
        return FCN(body, FCNHead(2048, num_classes), aux_head)
    return DeepLabV3(body, DeepLabHead(2048, num_classes), aux_head)


def _mobilenet_stages(features: nn.Sequential) -> list[int]:
    """Indices of the blocks that end a stage (the stem, every strided block, the last layer)."""
    return [0] + [i for i, b in enumerate(features) if getattr(b, "_is_cn", False)] + [len(features) - 1]


def mobilenet_deeplabv3(backbone: mobilenetv3.MobileNetV3, num_classes: int, aux: bool) -> DeepLabV3:
    """DeepLabV3 on a dilated MobileNetV3-Large: the head on C5 (the last layer), aux FCNHead on C2."""
    features = backbone.features
    stages = _mobilenet_stages(features)
    out_pos, aux_pos = stages[-1], stages[-4]
    return_layers = {str(out_pos): "out", **({str(aux_pos): "aux"} if aux else {})}
    body = IntermediateLayerGetter(features, return_layers)
    aux_head = FCNHead(features[aux_pos].out_channels, num_classes) if aux else None
    return DeepLabV3(body, DeepLabHead(features[out_pos].out_channels, num_classes), aux_head)


def mobilenet_lraspp(backbone: mobilenetv3.MobileNetV3, num_classes: int) -> LRASPP:
    """LR-ASPP on a dilated MobileNetV3-Large: low-level features from C2, high-level from C5."""
    features = backbone.features
    stages = _mobilenet_stages(features)
    low_pos, high_pos = stages[-4], stages[-1]
    body = IntermediateLayerGetter(features, {str(low_pos): "low", str(high_pos): "high"})
    return LRASPP(body, features[low_pos].out_channels, features[high_pos].out_channels, num_classes)


def fcn_resnet50(num_classes: int = 21, aux_loss: bool = False) -> nn.Module:
    return resnet_segmentation("fcn", dilated_resnet(50), num_classes, aux_loss)


def fcn_resnet101(num_classes: int = 21, aux_loss: bool = False) -> nn.Module:
    return resnet_segmentation("fcn", dilated_resnet(101), num_classes, aux_loss)


def deeplabv3_resnet50(num_classes: int = 21, aux_loss: bool = False) -> nn.Module:
    return resnet_segmentation("deeplabv3", dilated_resnet(50), num_classes, aux_loss)


def deeplabv3_resnet101(num_classes: int = 21, aux_loss: bool = False) -> nn.Module:
    return resnet_segmentation("deeplabv3", dilated_resnet(101), num_classes, aux_loss)


def deeplabv3_mobilenet_v3_large(num_classes: int = 21, aux_loss: bool = False) -> DeepLabV3:
    return mobilenet_deeplabv3(mobilenetv3.mobilenet_v3_large(dilated=True), num_classes, aux_loss)


def lraspp_mobilenet_v3_large(num_classes: int = 21) -> LRASPP:
    return mobilenet_lraspp(mobilenetv3.mobilenet_v3_large(dilated=True), num_classes)
