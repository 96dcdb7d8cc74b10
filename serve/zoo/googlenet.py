"""GoogLeNet (Szegedy et al., 2014, "Going deeper with convolutions") as `torchvision.models.googlenet`.

Inception modules with four branches (1x1 | 1x1-3x3 | 1x1-3x3 | 3x3 max pool-1x1) concatenated; every conv is
conv (no bias) + BatchNorm (eps 0.001) + ReLU (`BasicConv2d`). The "5x5" branch uses a 3x3 kernel, as in the
torchvision checkpoint. Two auxiliary classifiers (`aux1`, `aux2`) exist when `aux_logits` (the default without
weights) and are only run in training; `transform_input` re-normalizes ImageNet-normalized input to the
(x - 0.5) / 0.5 scale the original weights were trained on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import serve
import serve.nn.functional as F
from serve import nn

_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)


class GoogLeNetOutputs(NamedTuple):
    logits: serve.Tensor
    aux_logits2: serve.Tensor | None
    aux_logits1: serve.Tensor | None


class BasicConv2d(nn.Module):
    """Conv2d without bias, BatchNorm (eps 0.001), ReLU: keys `conv`, `bn`."""

    def __init__(self, in_channels: int, out_channels: int, **kwargs: Any) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
        self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return F.relu(self.bn(self.conv(x)), inplace=True)


def transform_input(x: serve.Tensor) -> serve.Tensor:
    """ImageNet-normalized input -> the (x - 0.5) / 0.5 scale, channel by channel."""
    chans = [x[:, c : c + 1] * (_STD[c] / 0.5) + (_MEAN[c] - 0.5) / 0.5 for c in range(3)]
    return serve.cat(chans, 1)


class Inception(nn.Module):
    """Four branches concatenated: ch1x1 + ch3x3 + ch5x5 + pool_proj channels."""

    def __init__(self, in_channels: int, ch1x1: int, ch3x3red: int, ch3x3: int, ch5x5red: int, ch5x5: int,
                 pool_proj: int, conv_block: Callable[..., nn.Module] | None = None) -> None:  # fmt: skip
        super().__init__()
        conv = conv_block or BasicConv2d
        self.branch1 = conv(in_channels, ch1x1, kernel_size=1)
        self.branch2 = nn.Sequential(conv(in_channels, ch3x3red, kernel_size=1),
                                     conv(ch3x3red, ch3x3, kernel_size=3, padding=1))  # fmt: skip
        self.branch3 = nn.Sequential(conv(in_channels, ch5x5red, kernel_size=1),
                                     conv(ch5x5red, ch5x5, kernel_size=3, padding=1))  # fmt: skip
        self.branch4 = nn.Sequential(nn.MaxPool2d(kernel_size=3, stride=1, padding=1, ceil_mode=True),
                                     conv(in_channels, pool_proj, kernel_size=1))  # fmt: skip

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return serve.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class InceptionAux(nn.Module):
    """Auxiliary classifier: 4x4 adaptive average, 1x1 conv to 128, Linear 2048->1024, dropout 0.7, Linear."""

    def __init__(self, in_channels: int, num_classes: int, conv_block: Callable[..., nn.Module] | None = None,
                 dropout: float = 0.7) -> None:  # fmt: skip
        super().__init__()
        self.conv = (conv_block or BasicConv2d)(in_channels, 128, kernel_size=1)
        self.fc1 = nn.Linear(2048, 1024)
        self.fc2 = nn.Linear(1024, num_classes)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = serve.flatten(self.conv(F.adaptive_avg_pool2d(x, (4, 4))), 1)  # (N, 128 * 4 * 4)
        return self.fc2(self.dropout(F.relu(self.fc1(x), inplace=True)))


class GoogLeNet(nn.Module):
    """torchvision's `GoogLeNet(num_classes=1000, aux_logits=True, transform_input=False, ...)`."""

    def __init__(
        self,
        num_classes: int = 1000,
        aux_logits: bool = True,
        transform_input: bool = False,
        init_weights: bool | None = None,
        blocks: list[Callable[..., nn.Module]] | None = None,
        dropout: float = 0.2,
        dropout_aux: float = 0.7,
    ) -> None:
        super().__init__()
        conv, inception, aux = blocks or [BasicConv2d, Inception, InceptionAux]
        self.aux_logits = aux_logits
        self.transform_input = transform_input
        self.conv1 = conv(3, 64, kernel_size=7, stride=2, padding=3)
        self.maxpool1 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.conv2 = conv(64, 64, kernel_size=1)
        self.conv3 = conv(64, 192, kernel_size=3, padding=1)
        self.maxpool2 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.inception3a = inception(192, 64, 96, 128, 16, 32, 32)
        self.inception3b = inception(256, 128, 128, 192, 32, 96, 64)
        self.maxpool3 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.inception4a = inception(480, 192, 96, 208, 16, 48, 64)
        self.inception4b = inception(512, 160, 112, 224, 24, 64, 64)
        self.inception4c = inception(512, 128, 128, 256, 24, 64, 64)
        self.inception4d = inception(512, 112, 144, 288, 32, 64, 64)
        self.inception4e = inception(528, 256, 160, 320, 32, 128, 128)
        self.maxpool4 = nn.MaxPool2d(2, stride=2, ceil_mode=True)
        self.inception5a = inception(832, 256, 160, 320, 32, 128, 128)
        self.inception5b = inception(832, 384, 192, 384, 48, 128, 128)
        self.aux1: nn.Module | None = aux(512, num_classes, dropout=dropout_aux) if aux_logits else None
        self.aux2: nn.Module | None = aux(528, num_classes, dropout=dropout_aux) if aux_logits else None
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(1024, num_classes)

    def forward(self, x: serve.Tensor) -> serve.Tensor | GoogLeNetOutputs:
        if self.transform_input:
            x = transform_input(x)
        x = self.maxpool1(self.conv1(x))  # (N, 64, H/4, W/4)
        x = self.maxpool2(self.conv3(self.conv2(x)))  # (N, 192, H/8, W/8)
        x = self.maxpool3(self.inception3b(self.inception3a(x)))  # (N, 480, H/16, W/16)
        x = self.inception4a(x)
        aux1 = self.aux1(x) if self.aux1 is not None and self.training else None
        x = self.inception4d(self.inception4c(self.inception4b(x)))
        aux2 = self.aux2(x) if self.aux2 is not None and self.training else None
        x = self.maxpool4(self.inception4e(x))  # (N, 832, H/32, W/32)
        x = self.inception5b(self.inception5a(x))  # (N, 1024, H/32, W/32)
        x = self.fc(self.dropout(serve.flatten(self.avgpool(x), 1)))
        if self.training and self.aux_logits:
            return GoogLeNetOutputs(x, aux2, aux1)
        return x


def googlenet(**kwargs: Any) -> GoogLeNet:
    """GoogLeNet (torchvision `googlenet(weights=None)`: auxiliary classifiers on, no input transform)."""
    return GoogLeNet(**kwargs)
