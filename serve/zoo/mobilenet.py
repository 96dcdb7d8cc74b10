"""MobileNetV2 (Sandler et al., 2018) as `torchvision.models.mobilenetv2`, with torchvision's module names.

Keys: `features.0.0` (stem conv), `features.0.1` (its BatchNorm), `features.1.conv.0.0` (first block's depthwise
conv), ..., `features.18.0` (last 1x1 conv), `classifier.1` (the Linear after Dropout).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import serve
import serve.nn.functional as F
from serve import nn
from serve.zoo.layers import Conv2dNormActivation

NormLayer = Callable[[int], nn.Module]

# t (expansion), c (output channels), n (repeats), s (stride of the first repeat)
_DEFAULT_SETTING = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
                    [6, 320, 1, 1]]  # fmt: skip


def _make_divisible(v: float, divisor: int, min_value: int | None = None) -> int:
    """Round `v` to a multiple of `divisor`, never going more than 10% below it (torchvision's rule)."""
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class InvertedResidual(nn.Module):
    """Expand (1x1), depthwise 3x3, project (1x1, linear); residual when the shape is kept."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int, norm_layer: NormLayer | None = None) -> None:
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"stride should be 1 or 2 instead of {stride}")
        norm_layer = norm_layer or nn.BatchNorm2d
        self.stride = stride
        hidden_dim = round(inp * expand_ratio)
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(
                Conv2dNormActivation(inp, hidden_dim, kernel_size=1, norm_layer=norm_layer, activation_layer=nn.ReLU6)
            )
        layers += [
            Conv2dNormActivation(
                hidden_dim, hidden_dim, stride=stride, groups=hidden_dim, norm_layer=norm_layer,
                activation_layer=nn.ReLU6,
            ),
            nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
            norm_layer(oup),
        ]  # fmt: skip
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision's `MobileNetV2(num_classes=1000, width_mult=1.0, ...)` (`mobilenet_v2(weights=None)`)."""

    def __init__(
        self,
        num_classes: int = 1000,
        width_mult: float = 1.0,
        inverted_residual_setting: list[list[int]] | None = None,
        round_nearest: int = 8,
        block: Callable[..., nn.Module] | None = None,
        norm_layer: NormLayer | None = None,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        block = block or InvertedResidual
        norm_layer = norm_layer or nn.BatchNorm2d
        setting = inverted_residual_setting or _DEFAULT_SETTING
        if len(setting) == 0 or len(setting[0]) != 4:
            raise ValueError(f"inverted_residual_setting should be non-empty or a 4-element list, got {setting}")
        input_channel = _make_divisible(32 * width_mult, round_nearest)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult), round_nearest)
        features: list[nn.Module] = [
            Conv2dNormActivation(3, input_channel, stride=2, norm_layer=norm_layer, activation_layer=nn.ReLU6)
        ]
        for t, c, n, s in setting:
            output_channel = _make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                features.append(block(input_channel, output_channel, s if i == 0 else 1, t, norm_layer=norm_layer))
                input_channel = output_channel
        features.append(
            Conv2dNormActivation(
                input_channel, self.last_channel, kernel_size=1, norm_layer=norm_layer, activation_layer=nn.ReLU6
            )
        )
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(self.last_channel, num_classes))
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = self.features(x)  # (N, last_channel, H/32, W/32)
        x = serve.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1)  # (N, last_channel)
        return self.classifier(x)


def mobilenet_v2(**kwargs: Any) -> MobileNetV2:
    """MobileNetV2 with torchvision's defaults (`mobilenet_v2(weights=None)`)."""
    return MobileNetV2(**kwargs)
