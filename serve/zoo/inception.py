"""Inception v3 (Szegedy et al., 2015, "Rethinking the Inception Architecture") as `torchvision.models.inception`.

Modules A-E of the paper (factorized 5x5 -> two 3x3, n x n -> 1 x n + n x 1, grid reductions B and D, expanded
filter banks E), every conv `BasicConv2d` (conv without bias, BatchNorm eps 0.001, ReLU). Keys as torchvision's:
`Conv2d_1a_3x3`, `Mixed_5b.branch5x5_1`, ..., `AuxLogits`, `fc`. Inputs of at least 75x75 (299x299 for the
published weights); the auxiliary head runs only in training.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import serve
import serve.nn.functional as F
from serve import nn
from serve.zoo.googlenet import BasicConv2d, transform_input

Conv = Callable[..., nn.Module]


class InceptionOutputs(NamedTuple):
    logits: serve.Tensor
    aux_logits: serve.Tensor | None


def _avg3(x: serve.Tensor) -> serve.Tensor:
    return F.avg_pool2d(x, kernel_size=3, stride=1, padding=1)


class InceptionA(nn.Module):
    """35x35 module: 1x1 | 1x1-5x5 | 1x1-3x3-3x3 | avgpool-1x1 (`pool_features`)."""

    def __init__(self, in_channels: int, pool_features: int, conv_block: Conv | None = None) -> None:
        super().__init__()
        c = conv_block or BasicConv2d
        self.branch1x1 = c(in_channels, 64, kernel_size=1)
        self.branch5x5_1 = c(in_channels, 48, kernel_size=1)
        self.branch5x5_2 = c(48, 64, kernel_size=5, padding=2)
        self.branch3x3dbl_1 = c(in_channels, 64, kernel_size=1)
        self.branch3x3dbl_2 = c(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = c(96, 96, kernel_size=3, padding=1)
        self.branch_pool = c(in_channels, pool_features, kernel_size=1)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return serve.cat([self.branch1x1(x), b5, b3, self.branch_pool(_avg3(x))], 1)


class InceptionB(nn.Module):
    """Grid reduction 35 -> 17: 3x3/2 | 1x1-3x3-3x3/2 | maxpool/2."""

    def __init__(self, in_channels: int, conv_block: Conv | None = None) -> None:
        super().__init__()
        c = conv_block or BasicConv2d
        self.branch3x3 = c(in_channels, 384, kernel_size=3, stride=2)
        self.branch3x3dbl_1 = c(in_channels, 64, kernel_size=1)
        self.branch3x3dbl_2 = c(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = c(96, 96, kernel_size=3, stride=2)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return serve.cat([self.branch3x3(x), b3, F.max_pool2d(x, kernel_size=3, stride=2)], 1)


class InceptionC(nn.Module):
    """17x17 module with 7x7 factorized into 1x7 and 7x1 (`channels_7x7` inner width)."""

    def __init__(self, in_channels: int, channels_7x7: int, conv_block: Conv | None = None) -> None:
        super().__init__()
        c, c7 = conv_block or BasicConv2d, channels_7x7
        self.branch1x1 = c(in_channels, 192, kernel_size=1)
        self.branch7x7_1 = c(in_channels, c7, kernel_size=1)
        self.branch7x7_2 = c(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7_3 = c(c7, 192, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = c(in_channels, c7, kernel_size=1)
        self.branch7x7dbl_2 = c(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = c(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = c(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = c(c7, 192, kernel_size=(1, 7), padding=(0, 3))
        self.branch_pool = c(in_channels, 192, kernel_size=1)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        d = self.branch7x7dbl_1(x)
        d = self.branch7x7dbl_5(self.branch7x7dbl_4(self.branch7x7dbl_3(self.branch7x7dbl_2(d))))
        return serve.cat([self.branch1x1(x), b7, d, self.branch_pool(_avg3(x))], 1)


class InceptionD(nn.Module):
    """Grid reduction 17 -> 8: 1x1-3x3/2 | 1x1-1x7-7x1-3x3/2 | maxpool/2."""

    def __init__(self, in_channels: int, conv_block: Conv | None = None) -> None:
        super().__init__()
        c = conv_block or BasicConv2d
        self.branch3x3_1 = c(in_channels, 192, kernel_size=1)
        self.branch3x3_2 = c(192, 320, kernel_size=3, stride=2)
        self.branch7x7x3_1 = c(in_channels, 192, kernel_size=1)
        self.branch7x7x3_2 = c(192, 192, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7x3_3 = c(192, 192, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7x3_4 = c(192, 192, kernel_size=3, stride=2)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        b3 = self.branch3x3_2(self.branch3x3_1(x))
        b7 = self.branch7x7x3_4(self.branch7x7x3_3(self.branch7x7x3_2(self.branch7x7x3_1(x))))
        return serve.cat([b3, b7, F.max_pool2d(x, kernel_size=3, stride=2)], 1)


class InceptionE(nn.Module):
    """8x8 module with expanded filter banks: 3x3 split into parallel 1x3 and 3x1 outputs."""

    def __init__(self, in_channels: int, conv_block: Conv | None = None) -> None:
        super().__init__()
        c = conv_block or BasicConv2d
        self.branch1x1 = c(in_channels, 320, kernel_size=1)
        self.branch3x3_1 = c(in_channels, 384, kernel_size=1)
        self.branch3x3_2a = c(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3_2b = c(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = c(in_channels, 448, kernel_size=1)
        self.branch3x3dbl_2 = c(448, 384, kernel_size=3, padding=1)
        self.branch3x3dbl_3a = c(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = c(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.branch_pool = c(in_channels, 192, kernel_size=1)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        b3 = self.branch3x3_1(x)
        b3 = serve.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        d = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        d = serve.cat([self.branch3x3dbl_3a(d), self.branch3x3dbl_3b(d)], 1)
        return serve.cat([self.branch1x1(x), b3, d, self.branch_pool(_avg3(x))], 1)


class InceptionAux(nn.Module):
    """Auxiliary head on the 17x17 grid: 5x5/3 average pool, 1x1 conv to 128, 5x5 conv to 768, Linear."""

    def __init__(self, in_channels: int, num_classes: int, conv_block: Conv | None = None) -> None:
        super().__init__()
        c = conv_block or BasicConv2d
        self.conv0 = c(in_channels, 128, kernel_size=1)
        self.conv1 = c(128, 768, kernel_size=5)
        self.conv1.stddev = 0.01  # type: ignore[assignment]
        self.fc = nn.Linear(768, num_classes)
        self.fc.stddev = 0.001  # type: ignore[assignment]

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = self.conv1(self.conv0(F.avg_pool2d(x, kernel_size=5, stride=3)))
        return self.fc(serve.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1))  # (N, num_classes)


class Inception3(nn.Module):
    """torchvision's `Inception3(num_classes=1000, aux_logits=True, transform_input=False, ...)`."""

    def __init__(
        self,
        num_classes: int = 1000,
        aux_logits: bool = True,
        transform_input: bool = False,
        inception_blocks: list[Callable[..., nn.Module]] | None = None,
        init_weights: bool | None = None,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        c, a, b, cc, d, e, aux = inception_blocks or [BasicConv2d, InceptionA, InceptionB, InceptionC, InceptionD,
                                                      InceptionE, InceptionAux]  # fmt: skip
        self.aux_logits = aux_logits
        self.transform_input = transform_input
        self.Conv2d_1a_3x3 = c(3, 32, kernel_size=3, stride=2)
        self.Conv2d_2a_3x3 = c(32, 32, kernel_size=3)
        self.Conv2d_2b_3x3 = c(32, 64, kernel_size=3, padding=1)
        self.maxpool1 = nn.MaxPool2d(kernel_size=3, stride=2)
        self.Conv2d_3b_1x1 = c(64, 80, kernel_size=1)
        self.Conv2d_4a_3x3 = c(80, 192, kernel_size=3)
        self.maxpool2 = nn.MaxPool2d(kernel_size=3, stride=2)
        self.Mixed_5b = a(192, pool_features=32)
        self.Mixed_5c = a(256, pool_features=64)
        self.Mixed_5d = a(288, pool_features=64)
        self.Mixed_6a = b(288)
        self.Mixed_6b = cc(768, channels_7x7=128)
        self.Mixed_6c = cc(768, channels_7x7=160)
        self.Mixed_6d = cc(768, channels_7x7=160)
        self.Mixed_6e = cc(768, channels_7x7=192)
        self.AuxLogits: nn.Module | None = aux(768, num_classes) if aux_logits else None
        self.Mixed_7a = d(768)
        self.Mixed_7b = e(1280)
        self.Mixed_7c = e(2048)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x: serve.Tensor) -> serve.Tensor | InceptionOutputs:
        if self.transform_input:
            x = transform_input(x)
        x = self.maxpool1(self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x))))
        x = self.maxpool2(self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x)))  # (N, 192, 35, 35) at 299x299
        x = self.Mixed_5d(self.Mixed_5c(self.Mixed_5b(x)))
        x = self.Mixed_6e(self.Mixed_6d(self.Mixed_6c(self.Mixed_6b(self.Mixed_6a(x)))))  # (N, 768, 17, 17)
        aux = self.AuxLogits(x) if self.AuxLogits is not None and self.training else None
        x = self.Mixed_7c(self.Mixed_7b(self.Mixed_7a(x)))  # (N, 2048, 8, 8)
        x = self.fc(self.dropout(serve.flatten(self.avgpool(x), 1)))
        if self.training and self.aux_logits:
            return InceptionOutputs(x, aux)
        return x


def inception_v3(**kwargs: Any) -> Inception3:
    """Inception v3 (torchvision `inception_v3(weights=None)`: auxiliary head on, no input transform)."""
    return Inception3(**kwargs)
