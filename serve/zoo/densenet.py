"""DenseNet (Huang et al., 2016) as `torchvision.models.densenet`: densenet121/161/169/201.

Each dense layer sees the concatenation of every earlier feature map in its block and adds `growth_rate`
channels (BN-ReLU-1x1 conv to `bn_size * growth_rate`, BN-ReLU-3x3 conv); transitions halve channels and size.
Keys as torchvision's: `features.conv0`, `features.denseblock1.denselayer1.norm1`, `features.transition1.conv`,
`features.norm5`, `classifier`. torchvision's published checkpoints predate that naming (`norm.1` for `norm1`):
`remap_legacy_keys` renames them, as torchvision does when it loads them.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

import serve
import serve.nn.functional as F
from serve import nn

_LEGACY = re.compile(
    r"^(.*denselayer\d+\.(?:norm|relu|conv))\.((?:[12])\.(?:weight|bias|running_mean|running_var|num_batches_tracked))$"
)


def remap_legacy_keys(state_dict: dict[str, Any]) -> dict[str, Any]:
    """`...denselayer1.norm.1.weight` -> `...denselayer1.norm1.weight`; other keys unchanged, order kept."""
    out: dict[str, Any] = {}
    for key, value in state_dict.items():
        m = _LEGACY.match(key)
        out[m.group(1) + m.group(2) if m else key] = value
    return out


class _DenseLayer(nn.Module):
    """BN-ReLU-conv1x1 (bottleneck) then BN-ReLU-conv3x3 to `growth_rate` new channels."""

    def __init__(self, num_input_features: int, growth_rate: int, bn_size: int, drop_rate: float,
                 memory_efficient: bool = False) -> None:  # fmt: skip
        super().__init__()
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, kernel_size=1, stride=1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, kernel_size=3, stride=1, padding=1, bias=False)
        self.drop_rate = float(drop_rate)
        self.memory_efficient = memory_efficient  # recomputation in training only; the same numbers either way

    def forward(self, input: serve.Tensor | list[serve.Tensor]) -> serve.Tensor:
        prev = [input] if isinstance(input, serve.Tensor) else input
        x = serve.cat(prev, 1)  # (N, all earlier channels, H, W)
        x = self.conv1(self.relu1(self.norm1(x)))
        x = self.conv2(self.relu2(self.norm2(x)))
        if self.drop_rate > 0:
            x = F.dropout(x, p=self.drop_rate, training=self.training)
        return x


class _DenseBlock(nn.ModuleDict):
    """`num_layers` dense layers (`denselayer1`, ...); returns every feature map concatenated."""

    def __init__(self, num_layers: int, num_input_features: int, bn_size: int, growth_rate: int, drop_rate: float,
                 memory_efficient: bool = False) -> None:  # fmt: skip
        super().__init__()
        for i in range(num_layers):
            layer = _DenseLayer(num_input_features + i * growth_rate, growth_rate, bn_size, drop_rate,
                                memory_efficient)  # fmt: skip
            self.add_module(f"denselayer{i + 1}", layer)

    def forward(self, init_features: serve.Tensor) -> serve.Tensor:
        features = [init_features]
        for layer in self.values():
            features.append(layer(features))
        return serve.cat(features, 1)


class _Transition(nn.Sequential):
    """BN-ReLU-conv1x1 to `num_output_features`, then a 2x2 average pool."""

    def __init__(self, num_input_features: int, num_output_features: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm2d(num_input_features)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(num_input_features, num_output_features, kernel_size=1, stride=1, bias=False)
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)


class DenseNet(nn.Module):
    """torchvision's `DenseNet(growth_rate=32, block_config=(6, 12, 24, 16), num_init_features=64, ...)`."""

    def __init__(
        self,
        growth_rate: int = 32,
        block_config: tuple[int, ...] = (6, 12, 24, 16),
        num_init_features: int = 64,
        bn_size: int = 4,
        drop_rate: float = 0,
        num_classes: int = 1000,
        memory_efficient: bool = False,
    ) -> None:
        super().__init__()
        self.features = nn.Sequential(
            OrderedDict(
                [
                    ("conv0", nn.Conv2d(3, num_init_features, kernel_size=7, stride=2, padding=3, bias=False)),
                    ("norm0", nn.BatchNorm2d(num_init_features)),
                    ("relu0", nn.ReLU(inplace=True)),
                    ("pool0", nn.MaxPool2d(kernel_size=3, stride=2, padding=1)),
                ]
            )
        )
        num_features = num_init_features
        for i, num_layers in enumerate(block_config):
            block = _DenseBlock(num_layers, num_features, bn_size, growth_rate, drop_rate, memory_efficient)
            self.features.add_module(f"denseblock{i + 1}", block)
            num_features += num_layers * growth_rate
            if i != len(block_config) - 1:
                self.features.add_module(f"transition{i + 1}", _Transition(num_features, num_features // 2))
                num_features //= 2
        self.features.add_module("norm5", nn.BatchNorm2d(num_features))
        self.classifier = nn.Linear(num_features, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.constant_(m.bias, 0)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        out = F.relu(self.features(x), inplace=True)
        out = serve.flatten(F.adaptive_avg_pool2d(out, (1, 1)), 1)  # (N, num_features)
        return self.classifier(out)


def densenet121(**kwargs: Any) -> DenseNet:
    """DenseNet-121: growth 32, blocks (6, 12, 24, 16), 64 initial features."""
    return DenseNet(32, (6, 12, 24, 16), 64, **kwargs)


def densenet161(**kwargs: Any) -> DenseNet:
    """DenseNet-161: growth 48, blocks (6, 12, 36, 24), 96 initial features."""
    return DenseNet(48, (6, 12, 36, 24), 96, **kwargs)


def densenet169(**kwargs: Any) -> DenseNet:
    """DenseNet-169: growth 32, blocks (6, 12, 32, 32), 64 initial features."""
    return DenseNet(32, (6, 12, 32, 32), 64, **kwargs)


def densenet201(**kwargs: Any) -> DenseNet:
    """DenseNet-201: growth 32, blocks (6, 12, 48, 32), 64 initial features."""
    return DenseNet(32, (6, 12, 48, 32), 64, **kwargs)
