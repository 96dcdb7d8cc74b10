"""MobileNetV3 (Howard et al., 2019) as `torchvision.models.mobilenetv3`: mobilenet_v3_large, mobilenet_v3_small.

Blocks from the paper's tables 1 and 2: (input, kernel, expanded, output, squeeze-excite, activation, stride);
activations ReLU ("RE") or hard-swish ("HS"); squeeze-excite gates with hard-sigmoid and squeezes to a quarter.
BatchNorm uses eps 0.001, momentum 0.01. Keys: `features.0.0` (stem), `features.N.block.M...`, `classifier.0`,
`classifier.3`, as torchvision's.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import serve
from serve import nn
from serve.zoo.layers import Conv2dNormActivation, SqueezeExcitation
from serve.zoo.mobilenet import _make_divisible

NormLayer = Callable[..., nn.Module]


class InvertedResidualConfig:
    """One block's settings, channels scaled by `width_mult` and rounded to multiples of 8."""

    def __init__(
        self,
        input_channels: int,
        kernel: int,
        expanded_channels: int,
        out_channels: int,
        use_se: bool,
        activation: str,
        stride: int,
        dilation: int,
        width_mult: float,
    ) -> None:
        self.input_channels = self.adjust_channels(input_channels, width_mult)
        self.kernel = kernel
        self.expanded_channels = self.adjust_channels(expanded_channels, width_mult)
        self.out_channels = self.adjust_channels(out_channels, width_mult)
        self.use_se = use_se
        self.use_hs = activation == "HS"
        self.stride = stride
        self.dilation = dilation

    @staticmethod
    def adjust_channels(channels: int, width_mult: float) -> int:
        return _make_divisible(channels * width_mult, 8)


class InvertedResidual(nn.Module):
    """[1x1 expand], depthwise kxk, [squeeze-excite], 1x1 project; residual when the shape is kept."""

    def __init__(
        self, cnf: InvertedResidualConfig, norm_layer: NormLayer, se_layer: Callable[..., nn.Module] | None = None
    ) -> None:
        super().__init__()
        se_layer = se_layer or partial(SqueezeExcitation, scale_activation=nn.Hardsigmoid)
        if not 1 <= cnf.stride <= 2:
            raise ValueError("illegal stride value")
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        act = nn.Hardswish if cnf.use_hs else nn.ReLU
        layers: list[nn.Module] = []
        if cnf.expanded_channels != cnf.input_channels:
            layers.append(
                Conv2dNormActivation(
                    cnf.input_channels,
                    cnf.expanded_channels,
                    kernel_size=1,
                    norm_layer=norm_layer,
                    activation_layer=act,
                )
            )
        stride = 1 if cnf.dilation > 1 else cnf.stride
        layers.append(
            Conv2dNormActivation(
                cnf.expanded_channels,
                cnf.expanded_channels,
                kernel_size=cnf.kernel,
                stride=stride,
                dilation=cnf.dilation,
                groups=cnf.expanded_channels,
                norm_layer=norm_layer,
                activation_layer=act,
            )
        )
        if cnf.use_se:
            layers.append(se_layer(cnf.expanded_channels, _make_divisible(cnf.expanded_channels // 4, 8)))
        layers.append(
            Conv2dNormActivation(
                cnf.expanded_channels, cnf.out_channels, kernel_size=1, norm_layer=norm_layer, activation_layer=None
            )
        )
        self.block = nn.Sequential(*layers)
        self.out_channels = cnf.out_channels
        self._is_cn = cnf.stride > 1

    def forward(self, input: serve.Tensor) -> serve.Tensor:
        result = self.block(input)
        return result + input if self.use_res_connect else result


class MobileNetV3(nn.Module):
    """torchvision's `MobileNetV3(inverted_residual_setting, last_channel, num_classes=1000, ...)`."""

    def __init__(
        self,
        inverted_residual_setting: list[InvertedResidualConfig],
        last_channel: int,
        num_classes: int = 1000,
        block: Callable[..., nn.Module] | None = None,
        norm_layer: NormLayer | None = None,
        dropout: float = 0.2,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if not inverted_residual_setting:
            raise ValueError("The inverted_residual_setting should not be empty")
        block = block or InvertedResidual
        norm_layer = norm_layer or partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        first = inverted_residual_setting[0].input_channels
        layers: list[nn.Module] = [Conv2dNormActivation(3, first, kernel_size=3, stride=2, norm_layer=norm_layer,
                                                        activation_layer=nn.Hardswish)]  # fmt: skip
        layers += [block(cnf, norm_layer) for cnf in inverted_residual_setting]
        last_in = inverted_residual_setting[-1].out_channels
        last_out = 6 * last_in
        layers.append(
            Conv2dNormActivation(last_in, last_out, kernel_size=1, norm_layer=norm_layer, activation_layer=nn.Hardswish)
        )
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(last_out, last_channel),
            nn.Hardswish(inplace=True),
            nn.Dropout(p=dropout, inplace=True),
            nn.Linear(last_channel, num_classes),
        )
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
        x = serve.flatten(self.avgpool(self.features(x)), 1)  # (N, 6 * last block's channels)
        return self.classifier(x)


# (input, kernel, expanded, output, SE, activation, stride) from the paper; the last three blocks' channels are
# halved with `reduced_tail` and dilated with `dilated` (segmentation backbones).
_LARGE = [
    (16, 3, 16, 16, False, "RE", 1),
    (16, 3, 64, 24, False, "RE", 2),
    (24, 3, 72, 24, False, "RE", 1),
    (24, 5, 72, 40, True, "RE", 2),
    (40, 5, 120, 40, True, "RE", 1),
    (40, 5, 120, 40, True, "RE", 1),
    (40, 3, 240, 80, False, "HS", 2),
    (80, 3, 200, 80, False, "HS", 1),
    (80, 3, 184, 80, False, "HS", 1),
    (80, 3, 184, 80, False, "HS", 1),
    (80, 3, 480, 112, True, "HS", 1),
    (112, 3, 672, 112, True, "HS", 1),
    (112, 5, 672, 160, True, "HS", 2),
    (160, 5, 960, 160, True, "HS", 1),
    (160, 5, 960, 160, True, "HS", 1),
]
_SMALL = [(16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2), (24, 3, 88, 24, False, "RE", 1),
          (24, 5, 96, 40, True, "HS", 2), (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
          (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1), (48, 5, 288, 96, True, "HS", 2),
          (96, 5, 576, 96, True, "HS", 1), (96, 5, 576, 96, True, "HS", 1)]  # fmt: skip


def _mobilenet_v3_conf(
    arch: str, width_mult: float = 1.0, reduced_tail: bool = False, dilated: bool = False, **kwargs: Any
) -> tuple[list[InvertedResidualConfig], int]:
    """The block settings and the classifier's hidden width for `arch`."""
    table, last = {"mobilenet_v3_large": (_LARGE, 1280), "mobilenet_v3_small": (_SMALL, 1024)}[arch]
    div, dil = (2 if reduced_tail else 1), (2 if dilated else 1)
    tail = len(table) - 3  # the blocks from the last stride-2 one (C4) on
    cnfs = []
    for i, (inp, k, exp, out, se, act, s) in enumerate(table):
        if i >= tail:
            inp = inp // div if i > tail else inp
            exp, out = (exp // div if i > tail else exp), out // div
        cnfs.append(InvertedResidualConfig(inp, k, exp, out, se, act, s, dil if i >= tail else 1, width_mult))
    return cnfs, InvertedResidualConfig.adjust_channels(last // div, width_mult)


def mobilenet_v3_large(**kwargs: Any) -> MobileNetV3:
    """MobileNetV3-Large (torchvision `mobilenet_v3_large(weights=None)`)."""
    cnfs, last = _mobilenet_v3_conf("mobilenet_v3_large", **kwargs)
    return MobileNetV3(cnfs, last, **_without_conf(kwargs))


def mobilenet_v3_small(**kwargs: Any) -> MobileNetV3:
    """MobileNetV3-Small (torchvision `mobilenet_v3_small(weights=None)`)."""
    cnfs, last = _mobilenet_v3_conf("mobilenet_v3_small", **kwargs)
    return MobileNetV3(cnfs, last, **_without_conf(kwargs))


def _without_conf(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if k not in ("width_mult", "reduced_tail", "dilated")}
