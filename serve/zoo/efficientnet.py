"""EfficientNet (Tan & Le, 2019) and EfficientNetV2 (Tan & Le, 2021) as `torchvision.models.efficientnet`.

efficientnet_b0..b7 scale the B0 stage table by (width, depth) and change dropout and, from B5, the BatchNorm
eps/momentum; efficientnet_v2_s/m/l start with Fused-MBConv stages. Blocks: MBConv (expand 1x1, depthwise kxk,
squeeze-excite to a quarter of the block's input, project 1x1) and FusedMBConv (one kxk conv instead of expand +
depthwise, no squeeze-excite); a residual block's branch goes through stochastic depth, with the drop probability
rising linearly to `stochastic_depth_prob` over all blocks. Activation SiLU. Keys as torchvision's:
`features.S.B.block.M...`, `classifier.1`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import serve
from serve import nn
from serve.zoo.layers import Conv2dNormActivation, SqueezeExcitation, StochasticDepth
from serve.zoo.mobilenet import _make_divisible

NormLayer = Callable[..., nn.Module]


class _MBConvConfig:
    """A stage: (expand ratio, kernel, stride, input channels, output channels, repeats) and its block type."""

    block: Callable[..., nn.Module]

    def __init__(
        self, expand_ratio: float, kernel: int, stride: int, input_channels: int, out_channels: int, num_layers: int
    ) -> None:
        self.expand_ratio = expand_ratio
        self.kernel = kernel
        self.stride = stride
        self.input_channels = input_channels
        self.out_channels = out_channels
        self.num_layers = num_layers

    @staticmethod
    def adjust_channels(channels: int, width_mult: float, min_value: int | None = None) -> int:
        return _make_divisible(channels * width_mult, 8, min_value)


class MBConvConfig(_MBConvConfig):
    """An MBConv stage, its channels scaled by `width_mult` and its repeats by `depth_mult` (rounded up)."""

    def __init__(
        self,
        expand_ratio: float,
        kernel: int,
        stride: int,
        input_channels: int,
        out_channels: int,
        num_layers: int,
        width_mult: float = 1.0,
        depth_mult: float = 1.0,
        block: Callable[..., nn.Module] | None = None,
    ) -> None:
        super().__init__(
            expand_ratio,
            kernel,
            stride,
            self.adjust_channels(input_channels, width_mult),
            self.adjust_channels(out_channels, width_mult),
            math.ceil(num_layers * depth_mult),
        )
        self.block = block or MBConv


class FusedMBConvConfig(_MBConvConfig):
    """A Fused-MBConv stage (EfficientNetV2's early stages)."""

    def __init__(
        self,
        expand_ratio: float,
        kernel: int,
        stride: int,
        input_channels: int,
        out_channels: int,
        num_layers: int,
        block: Callable[..., nn.Module] | None = None,
    ) -> None:
        super().__init__(expand_ratio, kernel, stride, input_channels, out_channels, num_layers)
        self.block = block or FusedMBConv


class MBConv(nn.Module):
    """Inverted residual with squeeze-excite: [expand 1x1], depthwise kxk, SE, project 1x1."""

    def __init__(
        self,
        cnf: _MBConvConfig,
        stochastic_depth_prob: float,
        norm_layer: NormLayer,
        se_layer: Callable[..., nn.Module] = SqueezeExcitation,
    ) -> None:
        super().__init__()
        if not 1 <= cnf.stride <= 2:
            raise ValueError("illegal stride value")
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        expanded = cnf.adjust_channels(cnf.input_channels, cnf.expand_ratio)
        layers: list[nn.Module] = []
        if expanded != cnf.input_channels:
            layers.append(
                Conv2dNormActivation(
                    cnf.input_channels, expanded, kernel_size=1, norm_layer=norm_layer, activation_layer=nn.SiLU
                )
            )
        layers.append(
            Conv2dNormActivation(
                expanded,
                expanded,
                kernel_size=cnf.kernel,
                stride=cnf.stride,
                groups=expanded,
                norm_layer=norm_layer,
                activation_layer=nn.SiLU,
            )
        )
        layers.append(se_layer(expanded, max(1, cnf.input_channels // 4), activation=partial(nn.SiLU, inplace=True)))
        layers.append(
            Conv2dNormActivation(
                expanded, cnf.out_channels, kernel_size=1, norm_layer=norm_layer, activation_layer=None
            )
        )
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
        self.out_channels = cnf.out_channels

    def forward(self, input: serve.Tensor) -> serve.Tensor:
        result = self.block(input)
        if self.use_res_connect:
            result = self.stochastic_depth(result) + input
        return result


class FusedMBConv(nn.Module):
    """Fused inverted residual: kxk conv (expanding), [project 1x1]."""

    def __init__(self, cnf: _MBConvConfig, stochastic_depth_prob: float, norm_layer: NormLayer) -> None:
        super().__init__()
        if not 1 <= cnf.stride <= 2:
            raise ValueError("illegal stride value")
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        expanded = cnf.adjust_channels(cnf.input_channels, cnf.expand_ratio)
        layers: list[nn.Module] = []
        if expanded != cnf.input_channels:
            layers.append(
                Conv2dNormActivation(
                    cnf.input_channels,
                    expanded,
                    kernel_size=cnf.kernel,
                    stride=cnf.stride,
                    norm_layer=norm_layer,
                    activation_layer=nn.SiLU,
                )
            )
            layers.append(
                Conv2dNormActivation(
                    expanded, cnf.out_channels, kernel_size=1, norm_layer=norm_layer, activation_layer=None
                )
            )
        else:
            layers.append(
                Conv2dNormActivation(
                    cnf.input_channels,
                    cnf.out_channels,
                    kernel_size=cnf.kernel,
                    stride=cnf.stride,
                    norm_layer=norm_layer,
                    activation_layer=nn.SiLU,
                )
            )
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
        self.out_channels = cnf.out_channels

    def forward(self, input: serve.Tensor) -> serve.Tensor:
        result = self.block(input)
        if self.use_res_connect:
            result = self.stochastic_depth(result) + input
        return result


class EfficientNet(nn.Module):
    """torchvision's `EfficientNet(inverted_residual_setting, dropout, stochastic_depth_prob=0.2, ...)`."""

    def __init__(
        self,
        inverted_residual_setting: Sequence[_MBConvConfig],
        dropout: float,
        stochastic_depth_prob: float = 0.2,
        num_classes: int = 1000,
        norm_layer: NormLayer | None = None,
        last_channel: int | None = None,
    ) -> None:
        super().__init__()
        if not inverted_residual_setting:
            raise ValueError("The inverted_residual_setting should not be empty")
        norm_layer = norm_layer or nn.BatchNorm2d
        first = inverted_residual_setting[0].input_channels
        layers: list[nn.Module] = [Conv2dNormActivation(3, first, kernel_size=3, stride=2, norm_layer=norm_layer,
                                                        activation_layer=nn.SiLU)]  # fmt: skip
        total = sum(cnf.num_layers for cnf in inverted_residual_setting)
        block_id = 0
        for cnf in inverted_residual_setting:
            stage: list[nn.Module] = []
            for _ in range(cnf.num_layers):
                block_cnf = copy.copy(cnf)
                if stage:  # only the first block of a stage changes channels or stride
                    block_cnf.input_channels, block_cnf.stride = block_cnf.out_channels, 1
                sd_prob = stochastic_depth_prob * float(block_id) / total
                stage.append(block_cnf.block(block_cnf, sd_prob, norm_layer))
                block_id += 1
            layers.append(nn.Sequential(*stage))
        last_in = inverted_residual_setting[-1].out_channels
        last_out = last_channel if last_channel is not None else 4 * last_in
        layers.append(
            Conv2dNormActivation(last_in, last_out, kernel_size=1, norm_layer=norm_layer, activation_layer=nn.SiLU)
        )
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=True), nn.Linear(last_out, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                init_range = 1.0 / math.sqrt(m.out_features)
                nn.init.uniform_(m.weight, -init_range, init_range)
                nn.init.zeros_(m.bias)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = serve.flatten(self.avgpool(self.features(x)), 1)  # (N, last_out)
        return self.classifier(x)


# EfficientNet-B0's stages: (expand, kernel, stride, in, out, repeats)
_B0 = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3),
       (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]  # fmt: skip
# EfficientNetV2: (fused?, expand, kernel, stride, in, out, repeats)
_V2 = {
    "s": [(1, 1, 3, 1, 24, 24, 2), (1, 4, 3, 2, 24, 48, 4), (1, 4, 3, 2, 48, 64, 4), (0, 4, 3, 2, 64, 128, 6),
          (0, 6, 3, 1, 128, 160, 9), (0, 6, 3, 2, 160, 256, 15)],
    "m": [(1, 1, 3, 1, 24, 24, 3), (1, 4, 3, 2, 24, 48, 5), (1, 4, 3, 2, 48, 80, 5), (0, 4, 3, 2, 80, 160, 7),
          (0, 6, 3, 1, 160, 176, 14), (0, 6, 3, 2, 176, 304, 18), (0, 6, 3, 1, 304, 512, 5)],
    "l": [(1, 1, 3, 1, 32, 32, 4), (1, 4, 3, 2, 32, 64, 7), (1, 4, 3, 2, 64, 96, 7), (0, 4, 3, 2, 96, 192, 10),
          (0, 6, 3, 1, 192, 224, 19), (0, 6, 3, 2, 224, 384, 25), (0, 6, 3, 1, 384, 640, 7)],
}  # fmt: skip
# B-variant: (width, depth, dropout, BatchNorm overrides)
_B = {
    0: (1.0, 1.0, 0.2),
    1: (1.0, 1.1, 0.2),
    2: (1.1, 1.2, 0.3),
    3: (1.2, 1.4, 0.3),
    4: (1.4, 1.8, 0.4),
    5: (1.6, 2.2, 0.4),
    6: (1.8, 2.6, 0.5),
    7: (2.0, 3.1, 0.5),
}
_V2_DROPOUT = {"s": 0.2, "m": 0.3, "l": 0.4}


def _efficientnet_b(n: int, kwargs: dict[str, Any]) -> EfficientNet:
    width, depth, dropout = _B[n]
    setting = [MBConvConfig(*row, width_mult=width, depth_mult=depth) for row in _B0]
    if n >= 5:
        kwargs.setdefault("norm_layer", partial(nn.BatchNorm2d, eps=0.001, momentum=0.01))
    return EfficientNet(setting, kwargs.pop("dropout", dropout), **kwargs)


def _efficientnet_v2(size: str, kwargs: dict[str, Any]) -> EfficientNet:
    setting: list[_MBConvConfig] = [
        FusedMBConvConfig(*row[1:]) if row[0] else MBConvConfig(*row[1:]) for row in _V2[size]
    ]
    kwargs.setdefault("norm_layer", partial(nn.BatchNorm2d, eps=1e-03))
    return EfficientNet(setting, kwargs.pop("dropout", _V2_DROPOUT[size]), last_channel=1280, **kwargs)


def efficientnet_b0(**kwargs: Any) -> EfficientNet:
    """EfficientNet-B0 (torchvision `efficientnet_b0(weights=None)`)."""
    return _efficientnet_b(0, kwargs)


def efficientnet_b1(**kwargs: Any) -> EfficientNet:
    """EfficientNet-B1: width 1.0, depth 1.1."""
    return _efficientnet_b(1, kwargs)


def efficientnet_b2(**kwargs: Any) -> EfficientNet:
    """EfficientNet-B2: width 1.1, depth 1.2."""
    return _efficientnet_b(2, kwargs)


def efficientnet_b3(**kwargs: Any) -> EfficientNet:
    """EfficientNet-B3: width 1.2, depth 1.4."""
    return _efficientnet_b(3, kwargs)


def efficientnet_b4(**kwargs: Any) -> EfficientNet:
    """EfficientNet-B4: width 1.4, depth 1.8."""
    return _efficientnet_b(4, kwargs)


def efficientnet_b5(**kwargs: Any) -> EfficientNet:
    """EfficientNet-B5: width 1.6, depth 2.2 (BatchNorm eps 0.001, momentum 0.01)."""
    return _efficientnet_b(5, kwargs)


def efficientnet_b6(**kwargs: Any) -> EfficientNet:
    """EfficientNet-B6: width 1.8, depth 2.6."""
    return _efficientnet_b(6, kwargs)


def efficientnet_b7(**kwargs: Any) -> EfficientNet:
    """EfficientNet-B7: width 2.0, depth 3.1."""
    return _efficientnet_b(7, kwargs)


def efficientnet_v2_s(**kwargs: Any) -> EfficientNet:
    """EfficientNetV2-S (BatchNorm eps 0.001)."""
    return _efficientnet_v2("s", kwargs)


def efficientnet_v2_m(**kwargs: Any) -> EfficientNet:
    """EfficientNetV2-M."""
    return _efficientnet_v2("m", kwargs)


def efficientnet_v2_l(**kwargs: Any) -> EfficientNet:
    """EfficientNetV2-L."""
    return _efficientnet_v2("l", kwargs)
