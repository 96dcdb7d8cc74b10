"""RegNet (Radosavovic et al., 2020, "Designing Network Design Spaces") as `torchvision.models.regnet`.

regnet_y_* (with squeeze-excite, ratio 0.25) and regnet_x_* are each given by (depth, w_0, w_a, w_m, group width):
block widths follow the quantized linear rule of the paper, w_j = w_0 * w_m ** round(log((w_0 + w_a j) / w_0) /
log(w_m)) rounded to a multiple of 8, computed in float32 as torchvision does so the rounding agrees; equal
consecutive widths form a stage, every stage starts with stride 2. Keys: `stem.0`, `trunk_output.block1.block1-0.
proj/f.a/f.b/f.se/f.c`, `fc`.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import serve
from serve import nn
from serve.zoo.layers import Conv2dNormActivation, SqueezeExcitation
from serve.zoo.mobilenet import _make_divisible

Layer = Callable[..., nn.Module]


class SimpleStemIN(Conv2dNormActivation):
    """3x3 stride-2 conv, norm, activation."""

    def __init__(self, width_in: int, width_out: int, norm_layer: Layer, activation_layer: Layer) -> None:
        super().__init__(width_in, width_out, kernel_size=3, stride=2, norm_layer=norm_layer,
                         activation_layer=activation_layer)  # fmt: skip


class BottleneckTransform(nn.Sequential):
    """`a` 1x1, `b` grouped 3x3 (strided), [`se`, squeezing to se_ratio x the block's input], `c` 1x1."""

    def __init__(self, width_in: int, width_out: int, stride: int, norm_layer: Layer, activation_layer: Layer,
                 group_width: int, bottleneck_multiplier: float, se_ratio: float | None) -> None:  # fmt: skip
        layers: OrderedDict[str, nn.Module] = OrderedDict()
        w_b = round(width_out * bottleneck_multiplier)
        layers["a"] = Conv2dNormActivation(width_in, w_b, kernel_size=1, norm_layer=norm_layer,
                                           activation_layer=activation_layer)  # fmt: skip
        layers["b"] = Conv2dNormActivation(w_b, w_b, kernel_size=3, stride=stride, groups=w_b // group_width,
                                           norm_layer=norm_layer, activation_layer=activation_layer)  # fmt: skip
        if se_ratio:
            layers["se"] = SqueezeExcitation(w_b, round(se_ratio * width_in), activation=activation_layer)
        layers["c"] = Conv2dNormActivation(w_b, width_out, kernel_size=1, norm_layer=norm_layer,
                                           activation_layer=None)  # fmt: skip
        super().__init__(layers)


class ResBottleneckBlock(nn.Module):
    """x (projected when the shape changes) + f(x), then the activation."""

    def __init__(self, width_in: int, width_out: int, stride: int, norm_layer: Layer, activation_layer: Layer,
                 group_width: int = 1, bottleneck_multiplier: float = 1.0,
                 se_ratio: float | None = None) -> None:  # fmt: skip
        super().__init__()
        self.proj: nn.Module | None = None
        if width_in != width_out or stride != 1:
            self.proj = Conv2dNormActivation(width_in, width_out, kernel_size=1, stride=stride,
                                             norm_layer=norm_layer, activation_layer=None)  # fmt: skip
        self.f = BottleneckTransform(width_in, width_out, stride, norm_layer, activation_layer, group_width,
                                     bottleneck_multiplier, se_ratio)  # fmt: skip
        self.activation = activation_layer(inplace=True)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        shortcut = x if self.proj is None else self.proj(x)
        return self.activation(shortcut + self.f(x))


class AnyStage(nn.Sequential):
    """`depth` blocks named `block{stage_index}-{i}`; the first one takes the stride and the width change."""

    def __init__(self, width_in: int, width_out: int, stride: int, depth: int, block_constructor: Layer,
                 norm_layer: Layer, activation_layer: Layer, group_width: int, bottleneck_multiplier: float,
                 se_ratio: float | None = None, stage_index: int = 0) -> None:  # fmt: skip
        super().__init__()
        for i in range(depth):
            block = block_constructor(
                width_in if i == 0 else width_out, width_out, stride if i == 0 else 1, norm_layer, activation_layer,
                group_width, bottleneck_multiplier, se_ratio,
            )  # fmt: skip
            self.add_module(f"block{stage_index}-{i}", block)


class BlockParams:
    """Per-stage depths, widths, group widths, bottleneck multipliers and strides."""

    def __init__(self, depths: list[int], widths: list[int], group_widths: list[int],
                 bottleneck_multipliers: list[float], strides: list[int],
                 se_ratio: float | None = None) -> None:  # fmt: skip
        self.depths = depths
        self.widths = widths
        self.group_widths = group_widths
        self.bottleneck_multipliers = bottleneck_multipliers
        self.strides = strides
        self.se_ratio = se_ratio

    @classmethod
    def from_init_params(cls, depth: int, w_0: int, w_a: float, w_m: float, group_width: int,
                         bottleneck_multiplier: float = 1.0, se_ratio: float | None = None,
                         **kwargs: Any) -> BlockParams:  # fmt: skip
        """The stages of the quantized linear width rule (float32 arithmetic, as torchvision's)."""
        if w_a < 0 or w_0 <= 0 or w_m <= 1 or w_0 % 8 != 0:
            raise ValueError("Invalid RegNet settings")
        f32 = np.float32
        cont = np.arange(depth, dtype=f32) * f32(w_a) + f32(w_0)
        capacity = np.round(np.log(cont / f32(w_0)) / f32(math.log(w_m))).astype(f32)
        widths = (np.round(f32(w_0) * np.power(f32(w_m), capacity) / f32(8)) * 8).astype(int).tolist()
        stage_widths: list[int] = []
        stage_depths: list[int] = []
        for w in widths:
            if stage_widths and stage_widths[-1] == w:
                stage_depths[-1] += 1
            else:
                stage_widths.append(w)
                stage_depths.append(1)
        n = len(stage_widths)
        mults = [bottleneck_multiplier] * n
        stage_widths, group_widths = cls._adjust_widths_groups_compatibilty(stage_widths, mults, [group_width] * n)
        return cls(stage_depths, stage_widths, group_widths, mults, [2] * n, se_ratio)

    @staticmethod
    def _adjust_widths_groups_compatibilty(stage_widths: list[int], bottleneck_ratios: list[float],
                                           group_widths: list[int]) -> tuple[list[int], list[int]]:  # fmt: skip
        """Bottleneck widths made multiples of their (capped) group widths."""
        bots = [int(w * b) for w, b in zip(stage_widths, bottleneck_ratios, strict=True)]
        groups = [min(g, w) for g, w in zip(group_widths, bots, strict=True)]
        bots = [_make_divisible(w, g) for w, g in zip(bots, groups, strict=True)]
        return [int(w / b) for w, b in zip(bots, bottleneck_ratios, strict=True)], groups

    def _get_expanded_params(self) -> Any:
        return zip(self.widths, self.strides, self.depths, self.group_widths, self.bottleneck_multipliers,
                   strict=True)  # fmt: skip


class RegNet(nn.Module):
    """torchvision's `RegNet(block_params, num_classes=1000, stem_width=32, ...)`."""

    def __init__(self, block_params: BlockParams, num_classes: int = 1000, stem_width: int = 32,
                 stem_type: Layer | None = None, block_type: Layer | None = None, norm_layer: Layer | None = None,
                 activation: Layer | None = None) -> None:  # fmt: skip
        super().__init__()
        stem_type = stem_type or SimpleStemIN
        norm_layer = norm_layer or nn.BatchNorm2d
        block_type = block_type or ResBottleneckBlock
        activation = activation or nn.ReLU
        self.stem = stem_type(3, stem_width, norm_layer, activation)
        width = stem_width
        blocks: list[tuple[str, nn.Module]] = []
        for i, (width_out, stride, depth, group_width, mult) in enumerate(block_params._get_expanded_params()):
            stage = AnyStage(width, width_out, stride, depth, block_type, norm_layer, activation, group_width, mult,
                             block_params.se_ratio, stage_index=i + 1)  # fmt: skip
            blocks.append((f"block{i + 1}", stage))
            width = width_out
        self.trunk_output = nn.Sequential(OrderedDict(blocks))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                nn.init.normal_(m.weight, mean=0.0, std=math.sqrt(2.0 / fan_out))
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, mean=0.0, std=0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = self.trunk_output(self.stem(x))
        return self.fc(serve.flatten(self.avgpool(x), 1))  # (N, num_classes)


# name: (depth, w_0, w_a, w_m, group width); the y family adds squeeze-excite (ratio 0.25)
_PARAMS: dict[str, tuple[int, int, float, float, int]] = {
    "regnet_y_400mf": (16, 48, 27.89, 2.09, 8), "regnet_y_800mf": (14, 56, 38.84, 2.4, 16),
    "regnet_y_1_6gf": (27, 48, 20.71, 2.65, 24), "regnet_y_3_2gf": (21, 80, 42.63, 2.66, 24),
    "regnet_y_8gf": (17, 192, 76.82, 2.19, 56), "regnet_y_16gf": (18, 200, 106.23, 2.48, 112),
    "regnet_y_32gf": (20, 232, 115.89, 2.53, 232), "regnet_y_128gf": (27, 456, 160.83, 2.52, 264),
    "regnet_x_400mf": (22, 24, 24.48, 2.54, 16), "regnet_x_800mf": (16, 56, 35.73, 2.28, 16),
    "regnet_x_1_6gf": (18, 80, 34.01, 2.25, 24), "regnet_x_3_2gf": (25, 88, 26.31, 2.25, 48),
    "regnet_x_8gf": (23, 80, 49.56, 2.88, 120), "regnet_x_16gf": (22, 216, 55.59, 2.1, 128),
    "regnet_x_32gf": (23, 320, 69.86, 2.0, 168),
}  # fmt: skip


def _regnet(name: str, kwargs: dict[str, Any]) -> RegNet:
    depth, w_0, w_a, w_m, group_width = _PARAMS[name]
    se_ratio = 0.25 if name.startswith("regnet_y") else None
    params = BlockParams.from_init_params(depth, w_0, w_a, w_m, group_width, se_ratio=se_ratio)
    kwargs.setdefault("norm_layer", partial(nn.BatchNorm2d, eps=1e-05, momentum=0.1))
    return RegNet(params, **kwargs)


def _constructor(name: str) -> Callable[..., RegNet]:
    def build(**kwargs: Any) -> RegNet:
        return _regnet(name, kwargs)

    build.__name__ = build.__qualname__ = name
    build.__doc__ = f"{name} (torchvision `{name}(weights=None)`): depth, w_0, w_a, w_m, group width {_PARAMS[name]}."
    return build


regnet_y_400mf = _constructor("regnet_y_400mf")
regnet_y_800mf = _constructor("regnet_y_800mf")
regnet_y_1_6gf = _constructor("regnet_y_1_6gf")
regnet_y_3_2gf = _constructor("regnet_y_3_2gf")
regnet_y_8gf = _constructor("regnet_y_8gf")
regnet_y_16gf = _constructor("regnet_y_16gf")
regnet_y_32gf = _constructor("regnet_y_32gf")
regnet_y_128gf = _constructor("regnet_y_128gf")
regnet_x_400mf = _constructor("regnet_x_400mf")
regnet_x_800mf = _constructor("regnet_x_800mf")
regnet_x_1_6gf = _constructor("regnet_x_1_6gf")
regnet_x_3_2gf = _constructor("regnet_x_3_2gf")
regnet_x_8gf = _constructor("regnet_x_8gf")
regnet_x_16gf = _constructor("regnet_x_16gf")
regnet_x_32gf = _constructor("regnet_x_32gf")
