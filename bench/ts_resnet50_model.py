"""ResNet-50 in plain PyTorch with torchvision's layout and state_dict names, for the TorchServe side of
bench/server_bf16.py.

TorchServe's venv (../shared/anchors/torchserve: torch 2.13.0, TorchServe 0.12.0, no torchvision, no pytest) cannot
import tests/unit/zoo/twins_vision.py (it skips through pytest when torch is missing), so this file, shipped in the
.mar beside the anchor's handler, is the model there. It is torchvision's ResNet v1.5 (the stride on the 3x3 of a
bottleneck): bench/server_bf16.py loads the twin's seeded weights into it with strict=True and checks that its output
equals the twin's before it builds the archive, so TorchServe and serve run the same network with the same weights.
Only torch is imported.
"""

from __future__ import annotations

import torch
from torch import nn


class Bottleneck(nn.Module):
    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        width, out = planes, planes * 4
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + identity)


def _layer(inplanes: int, planes: int, blocks: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        Bottleneck(inplanes, planes, stride), *(Bottleneck(planes * 4, planes) for _ in range(blocks - 1))
    )


class ResNet50(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = _layer(64, 64, 3, 1)
        self.layer2 = _layer(256, 128, 4, 2)
        self.layer3 = _layer(512, 256, 6, 2)
        self.layer4 = _layer(1024, 512, 3, 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, 3, 224, 224) -> (N, 1000)
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))  # (N, 2048, 7, 7)
        return self.fc(torch.flatten(self.avgpool(x), 1))  # (N, 2048) @ (2048, 1000)


def resnet50() -> ResNet50:
    return ResNet50().eval()
