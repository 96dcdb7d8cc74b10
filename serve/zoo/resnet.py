"""ResNet (He et al., 2015), ResNeXt and Wide ResNet as `torchvision.models.resnet`: BasicBlock, Bottleneck, ResNet.

Constructors: resnet18/34/50/101/152, resnext50_32x4d, resnext101_32x8d, resnext101_64x4d, wide_resnet50_2,
wide_resnet101_2 (ResNeXt is `groups` x `width_per_group`; Wide ResNet doubles the bottleneck width).

Module names follow torchvision exactly (`conv1`, `bn1`, `layer1.0.conv1`, `layer1.0.downsample.0`, `fc`, ...),
so a torchvision checkpoint loads with `load_state_dict(strict=True)`. Bottleneck puts the stride on the 3x3
convolution (ResNet v1.5), as torchvision does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import serve
from serve import nn

NormLayer = Callable[[int], nn.Module]


def conv3x3(in_planes: int, out_planes: int, stride: int = 1, groups: int = 1, dilation: int = 1) -> nn.Conv2d:
    """3x3 convolution with padding."""
    return nn.Conv2d(
        in_planes, out_planes, 3, stride=stride, padding=dilation, groups=groups, bias=False, dilation=dilation
    )


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    """1x1 convolution."""
    return nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (ResNet-18/34)."""

    expansion = 1

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
        groups: int = 1,
        base_width: int = 64,
        dilation: int = 1,
        norm_layer: NormLayer | None = None,
    ) -> None:
        super().__init__()
        norm_layer = norm_layer or nn.BatchNorm2d
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock only supports groups=1 and base_width=64")
        if dilation > 1:
            raise NotImplementedError("Dilation > 1 not supported in BasicBlock")
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity  # in place, as torchvision: one pass, no new buffer
        return self.relu(out)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided), 1x1 expand by 4, with a residual connection (ResNet-50 and deeper)."""

    expansion = 4

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
        groups: int = 1,
        base_width: int = 64,
        dilation: int = 1,
        norm_layer: NormLayer | None = None,
    ) -> None:
        super().__init__()
        norm_layer = norm_layer or nn.BatchNorm2d
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = norm_layer(width)
        self.conv2 = conv3x3(width, width, stride, groups, dilation)
        self.bn2 = norm_layer(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity  # in place, as torchvision: one pass, no new buffer
        return self.relu(out)


Block = type[BasicBlock] | type[Bottleneck]


class ResNet(nn.Module):
    """torchvision's `ResNet(block, layers, num_classes=1000, ...)`: stem, four stages, global pool, `fc`."""

    def __init__(
        self,
        block: Block,
        layers: list[int],
        num_classes: int = 1000,
        zero_init_residual: bool = False,
        groups: int = 1,
        width_per_group: int = 64,
        replace_stride_with_dilation: list[bool] | None = None,
        norm_layer: NormLayer | None = None,
    ) -> None:
        super().__init__()
        self._norm_layer = norm_layer or nn.BatchNorm2d
        self.inplanes = 64
        self.dilation = 1
        dilate = replace_stride_with_dilation or [False, False, False]
        if len(dilate) != 3:
            raise ValueError(f"replace_stride_with_dilation should be None or a 3-element tuple, got {dilate}")
        self.groups = groups
        self.base_width = width_per_group
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = self._norm_layer(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2, dilate=dilate[0])
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2, dilate=dilate[1])
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2, dilate=dilate[2])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        self._init_weights(zero_init_residual)

    def _init_weights(self, zero_init_residual: bool) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        if zero_init_residual:  # each residual branch starts as zero, so each block starts as an identity
            for m in self.modules():
                if isinstance(m, Bottleneck):
                    nn.init.constant_(m.bn3.weight, 0)
                elif isinstance(m, BasicBlock):
                    nn.init.constant_(m.bn2.weight, 0)

    def _make_layer(
        self, block: Block, planes: int, blocks: int, stride: int = 1, dilate: bool = False
    ) -> nn.Sequential:
        norm_layer = self._norm_layer
        downsample = None
        previous_dilation = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride), norm_layer(planes * block.expansion)
            )
        layers: list[nn.Module] = [
            block(
                self.inplanes, planes, stride, downsample, self.groups, self.base_width, previous_dilation, norm_layer
            )
        ]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(
                block(
                    self.inplanes,
                    planes,
                    groups=self.groups,
                    base_width=self.base_width,
                    dilation=self.dilation,
                    norm_layer=norm_layer,
                )
            )
        return nn.Sequential(*layers)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))  # (N, 64, H/4, W/4)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))  # (N, 512 * expansion, H/32, W/32)
        x = serve.flatten(self.avgpool(x), 1)  # (N, 512 * expansion)
        return self.fc(x)


def resnet18(**kwargs: Any) -> ResNet:
    """ResNet-18 (torchvision `resnet18(weights=None)`): BasicBlock, [2, 2, 2, 2]."""
    return ResNet(BasicBlock, [2, 2, 2, 2], **kwargs)


def resnet34(**kwargs: Any) -> ResNet:
    """ResNet-34 (torchvision `resnet34(weights=None)`): BasicBlock, [3, 4, 6, 3]."""
    return ResNet(BasicBlock, [3, 4, 6, 3], **kwargs)


def resnet50(**kwargs: Any) -> ResNet:
    """ResNet-50 (torchvision `resnet50(weights=None)`): Bottleneck, [3, 4, 6, 3]."""
    return ResNet(Bottleneck, [3, 4, 6, 3], **kwargs)


def resnet101(**kwargs: Any) -> ResNet:
    """ResNet-101: Bottleneck, [3, 4, 23, 3]."""
    return ResNet(Bottleneck, [3, 4, 23, 3], **kwargs)


def resnet152(**kwargs: Any) -> ResNet:
    """ResNet-152: Bottleneck, [3, 8, 36, 3]."""
    return ResNet(Bottleneck, [3, 8, 36, 3], **kwargs)


def _variant(layers: list[int], groups: int, width: int, kwargs: dict[str, Any]) -> ResNet:
    kwargs.setdefault("groups", groups)
    kwargs.setdefault("width_per_group", width)
    return ResNet(Bottleneck, layers, **kwargs)


def resnext50_32x4d(**kwargs: Any) -> ResNet:
    """ResNeXt-50 32x4d: 32 groups of width 4."""
    return _variant([3, 4, 6, 3], 32, 4, kwargs)


def resnext101_32x8d(**kwargs: Any) -> ResNet:
    """ResNeXt-101 32x8d: 32 groups of width 8."""
    return _variant([3, 4, 23, 3], 32, 8, kwargs)


def resnext101_64x4d(**kwargs: Any) -> ResNet:
    """ResNeXt-101 64x4d: 64 groups of width 4."""
    return _variant([3, 4, 23, 3], 64, 4, kwargs)


def wide_resnet50_2(**kwargs: Any) -> ResNet:
    """Wide ResNet-50-2: the bottleneck's inner width doubled (128 per group)."""
    return _variant([3, 4, 6, 3], 1, 128, kwargs)


def wide_resnet101_2(**kwargs: Any) -> ResNet:
    """Wide ResNet-101-2: the bottleneck's inner width doubled (128 per group)."""
    return _variant([3, 4, 23, 3], 1, 128, kwargs)
