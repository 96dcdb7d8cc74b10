"""LeNet-5 for 1x32x32 images: the `Net` of PyTorch's "Neural Networks" tutorial (LeCun et al., 1998)."""

from __future__ import annotations

import serve
import serve.nn.functional as F
from serve import nn


class LeNet(nn.Module):
    """LeNet-5 on 1x32x32 inputs (pad 28x28 MNIST digits by 2 on each side, as LeCun did).

    conv(1->6, 5x5) -> ReLU -> maxpool 2 -> conv(6->16, 5x5) -> ReLU -> maxpool 2 -> 400 -> 120 -> 84 -> classes.
    The layer names (`conv1`, `conv2`, `fc1`, `fc2`, `fc3`) and hence the `state_dict` keys are those of the
    PyTorch tutorial's `Net`, whose ReLU and max pooling stand in for the paper's scaled tanh and subsampling.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # (N, 6, 14, 14)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # (N, 16, 5, 5)
        x = serve.flatten(x, 1)  # (N, 400)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)
