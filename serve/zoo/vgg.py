"""VGG (Simonyan & Zisserman, 2014) as `torchvision.models.vgg`: vgg11/13/16/19 and their `_bn` variants.

Configurations A, B, D, E of the paper: 3x3 convolutions (padding 1) in five stages, max-pooled by 2, then a
7x7 adaptive average pool and three Linear layers. Keys: `features.N` (convs, and BatchNorms in `_bn`),
`classifier.0/3/6`.
"""

from __future__ import annotations

from typing import Any

import serve
from serve import nn

# channels per conv, "M" for a 2x2 max pool
cfgs: dict[str, list[int | str]] = {
    "A": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "B": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "D": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "E": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}


class VGG(nn.Module):
    """torchvision's `VGG(features, num_classes=1000, init_weights=True, dropout=0.5)`."""

    def __init__(self, features: nn.Module, num_classes: int = 1000, init_weights: bool = True,
                 dropout: float = 0.5) -> None:  # fmt: skip
        super().__init__()
        self.features = features
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(p=dropout),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(p=dropout),
            nn.Linear(4096, num_classes),
        )  # fmt: skip
        if init_weights:
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                    if m.bias is not None:
                        nn.init.constant_(m.bias, 0)
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)
                elif isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, 0, 0.01)
                    nn.init.constant_(m.bias, 0)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = serve.flatten(self.avgpool(self.features(x)), 1)  # (N, 512 * 7 * 7)
        return self.classifier(x)


def make_layers(cfg: list[int | str], batch_norm: bool = False) -> nn.Sequential:
    """The convolutional stages of a configuration."""
    layers: list[nn.Module] = []
    in_channels = 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            continue
        out = int(v)
        layers.append(nn.Conv2d(in_channels, out, kernel_size=3, padding=1))
        if batch_norm:
            layers.append(nn.BatchNorm2d(out))
        layers.append(nn.ReLU(inplace=True))
        in_channels = out
    return nn.Sequential(*layers)


def _vgg(cfg: str, batch_norm: bool, kwargs: dict[str, Any]) -> VGG:
    return VGG(make_layers(cfgs[cfg], batch_norm=batch_norm), **kwargs)


def vgg11(**kwargs: Any) -> VGG:
    """VGG-11 (configuration A)."""
    return _vgg("A", False, kwargs)


def vgg11_bn(**kwargs: Any) -> VGG:
    """VGG-11 with BatchNorm."""
    return _vgg("A", True, kwargs)


def vgg13(**kwargs: Any) -> VGG:
    """VGG-13 (configuration B)."""
    return _vgg("B", False, kwargs)


def vgg13_bn(**kwargs: Any) -> VGG:
    """VGG-13 with BatchNorm."""
    return _vgg("B", True, kwargs)


def vgg16(**kwargs: Any) -> VGG:
    """VGG-16 (configuration D)."""
    return _vgg("D", False, kwargs)


def vgg16_bn(**kwargs: Any) -> VGG:
    """VGG-16 with BatchNorm."""
    return _vgg("D", True, kwargs)


def vgg19(**kwargs: Any) -> VGG:
    """VGG-19 (configuration E)."""
    return _vgg("E", False, kwargs)


def vgg19_bn(**kwargs: Any) -> VGG:
    """VGG-19 with BatchNorm."""
    return _vgg("E", True, kwargs)
