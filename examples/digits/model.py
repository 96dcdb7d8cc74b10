"""A LeNet-style digits classifier (1x32x32 grayscale in, 10 logits out), written in plain PyTorch.

The same file trains under real PyTorch (train.py) and is served unmodified by serve: the archive is built
with `model-archiver --torch-compat`, so `import torch`, `torch.nn` and `torch.nn.functional` resolve to
serve's runtime inside the worker. Layer names, and hence the checkpoint's state_dict keys, are PyTorch's.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class DigitsNet(nn.Module):
    """conv(1->6, 5x5) -> ReLU -> maxpool 2 -> conv(6->16, 5x5) -> ReLU -> maxpool 2 -> 400 -> 120 -> 84 -> 10."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # (N, 6, 14, 14)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # (N, 16, 5, 5)
        x = torch.flatten(x, 1)  # (N, 400)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)  # (N, 10)
