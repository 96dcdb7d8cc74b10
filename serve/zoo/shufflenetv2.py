"""ShuffleNet V2 (Ma et al., 2018) as `torchvision.models.shufflenetv2`: shufflenet_v2_x0_5/x1_0/x1_5/x2_0.

A unit splits its channels in two (stride 1) or runs two branches on the whole input (stride 2), concatenates,
then shuffles channels between the two halves so information crosses branches. Keys: `conv1.0`, `stage2.0.branch1`,
`stage2.0.branch2.0`, ..., `conv5.0`, `fc`.
"""

from __future__ import annotations

from typing import Any

import serve
from serve import nn


def channel_shuffle(x: serve.Tensor, groups: int) -> serve.Tensor:
    """Interleave the channels of `groups` equal groups: (N, g*c, H, W) -> view (N, g, c) -> (N, c, g) -> flat."""
    batch, channels, height, width = x.shape
    x = x.view(batch, groups, channels // groups, height, width)  # (N, g, C/g, H, W)
    x = x.transpose(1, 2).contiguous()  # (N, C/g, g, H, W)
    return x.view(batch, channels, height, width)


def _depthwise(channels: int, stride: int) -> nn.Conv2d:
    return nn.Conv2d(channels, channels, 3, stride, 1, bias=False, groups=channels)


def _pointwise(i: int, o: int) -> nn.Conv2d:
    return nn.Conv2d(i, o, kernel_size=1, stride=1, padding=0, bias=False)


class InvertedResidual(nn.Module):
    """A ShuffleNet V2 unit: `oup // 2` channels per branch."""

    def __init__(self, inp: int, oup: int, stride: int) -> None:
        super().__init__()
        if not 1 <= stride <= 3:
            raise ValueError("illegal stride value")
        self.stride = stride
        bf = oup // 2
        if stride == 1 and inp != bf << 1:
            raise ValueError(f"Invalid combination of stride {stride}, inp {inp} and oup {oup} values")
        if stride > 1:
            self.branch1 = nn.Sequential(
                _depthwise(inp, stride), nn.BatchNorm2d(inp), _pointwise(inp, bf), nn.BatchNorm2d(bf),
                nn.ReLU(inplace=True),
            )  # fmt: skip
        else:
            self.branch1 = nn.Sequential()
        self.branch2 = nn.Sequential(
            _pointwise(inp if stride > 1 else bf, bf), nn.BatchNorm2d(bf), nn.ReLU(inplace=True),
            _depthwise(bf, stride), nn.BatchNorm2d(bf),
            _pointwise(bf, bf), nn.BatchNorm2d(bf), nn.ReLU(inplace=True),
        )  # fmt: skip

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = serve.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = serve.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """torchvision's `ShuffleNetV2(stages_repeats, stages_out_channels, num_classes=1000, ...)`."""

    def __init__(self, stages_repeats: list[int], stages_out_channels: list[int], num_classes: int = 1000,
                 inverted_residual: type[nn.Module] = InvertedResidual) -> None:  # fmt: skip
        super().__init__()
        if len(stages_repeats) != 3:
            raise ValueError("expected stages_repeats as list of 3 positive ints")
        if len(stages_out_channels) != 5:
            raise ValueError("expected stages_out_channels as list of 5 positive ints")
        self._stage_out_channels = stages_out_channels
        inp = stages_out_channels[0]
        self.conv1 = nn.Sequential(nn.Conv2d(3, inp, 3, 2, 1, bias=False), nn.BatchNorm2d(inp), nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.stage2: nn.Sequential
        self.stage3: nn.Sequential
        self.stage4: nn.Sequential
        for i, (repeats, out) in enumerate(zip(stages_repeats, stages_out_channels[1:4], strict=True)):
            units = [inverted_residual(inp, out, 2)] + [inverted_residual(out, out, 1) for _ in range(repeats - 1)]
            setattr(self, f"stage{i + 2}", nn.Sequential(*units))
            inp = out
        last = stages_out_channels[-1]
        self.conv5 = nn.Sequential(_pointwise(inp, last), nn.BatchNorm2d(last), nn.ReLU(inplace=True))
        self.fc = nn.Linear(last, num_classes)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = self.maxpool(self.conv1(x))
        x = self.conv5(self.stage4(self.stage3(self.stage2(x))))
        return self.fc(x.mean([2, 3]))  # global average pool: (N, C)


def shufflenet_v2_x0_5(**kwargs: Any) -> ShuffleNetV2:
    """ShuffleNet V2 0.5x."""
    return ShuffleNetV2([4, 8, 4], [24, 48, 96, 192, 1024], **kwargs)


def shufflenet_v2_x1_0(**kwargs: Any) -> ShuffleNetV2:
    """ShuffleNet V2 1.0x."""
    return ShuffleNetV2([4, 8, 4], [24, 116, 232, 464, 1024], **kwargs)


def shufflenet_v2_x1_5(**kwargs: Any) -> ShuffleNetV2:
    """ShuffleNet V2 1.5x."""
    return ShuffleNetV2([4, 8, 4], [24, 176, 352, 704, 1024], **kwargs)


def shufflenet_v2_x2_0(**kwargs: Any) -> ShuffleNetV2:
    """ShuffleNet V2 2.0x."""
    return ShuffleNetV2([4, 8, 4], [24, 244, 488, 976, 2048], **kwargs)
