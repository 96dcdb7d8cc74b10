"""AlexNet (Krizhevsky et al., 2012, in the one-GPU form of "One weird trick", 2014) as `torchvision.models.alexnet`.

Five convolutions (64, 192, 384, 256, 256 channels), three max pools, a 6x6 adaptive average pool, three Linear
layers. Keys: `features.0/3/6/8/10`, `classifier.1/4/6`. Inputs of at least 63x63.
"""

from __future__ import annotations

from typing import Any

import serve
from serve import nn


class AlexNet(nn.Module):
    """torchvision's `AlexNet(num_classes=1000, dropout=0.5)`."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(64, 192, kernel_size=5, padding=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )  # fmt: skip
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True),
            nn.Dropout(p=dropout), nn.Linear(4096, 4096), nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )  # fmt: skip

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = serve.flatten(self.avgpool(self.features(x)), 1)  # (N, 256 * 6 * 6)
        return self.classifier(x)


def alexnet(**kwargs: Any) -> AlexNet:
    """AlexNet (torchvision `alexnet(weights=None)`)."""
    return AlexNet(**kwargs)
