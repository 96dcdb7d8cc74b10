"""ConvNeXt (Liu et al., 2022, "A ConvNet for the 2020s") as `torchvision.models.convnext`: tiny/small/base/large.

A 4x4/4 patchify stem with channels-first LayerNorm; blocks of depthwise 7x7 conv, LayerNorm, Linear to 4x,
GELU, Linear back, scaled per channel by a learned layer scale (`layer_scale`, init 1e-6) and dropped by
stochastic depth (rising linearly to the variant's rate); 2x2/2 downsampling with LayerNorm between stages.
Keys: `features.0.0/1`, `features.1.0.block.0/2/3/5`, `features.1.0.layer_scale`, `features.2.0/1`,
`classifier.0/2`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import serve
from serve import nn
from serve.zoo.layers import Conv2dNormActivation, LayerNorm2d, Permute, StochasticDepth

Layer = Callable[..., nn.Module]


class CNBlock(nn.Module):
    """x + stochastic_depth(layer_scale * block(x))."""

    def __init__(self, dim: int, layer_scale: float, stochastic_depth_prob: float,
                 norm_layer: Layer | None = None) -> None:  # fmt: skip
        super().__init__()
        norm_layer = norm_layer or partial(nn.LayerNorm, eps=1e-6)
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim, bias=True),
            Permute([0, 2, 3, 1]),  # (N, H, W, C): LayerNorm and Linear act on channels
            norm_layer(dim), nn.Linear(dim, 4 * dim, bias=True), nn.GELU(), nn.Linear(4 * dim, dim, bias=True),
            Permute([0, 3, 1, 2]),  # (N, C, H, W)
        )  # fmt: skip
        self.layer_scale = nn.Parameter(serve.ones(dim, 1, 1) * layer_scale)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

    def forward(self, input: serve.Tensor) -> serve.Tensor:
        result = self.layer_scale * self.block(input)
        return self.stochastic_depth(result) + input


class CNBlockConfig:
    """A stage: its width, the next stage's width (None for the last), its number of blocks."""

    def __init__(self, input_channels: int, out_channels: int | None, num_layers: int) -> None:
        self.input_channels = input_channels
        self.out_channels = out_channels
        self.num_layers = num_layers


class ConvNeXt(nn.Module):
    """torchvision's `ConvNeXt(block_setting, stochastic_depth_prob=0.0, layer_scale=1e-6, num_classes=1000)`."""

    def __init__(self, block_setting: Sequence[CNBlockConfig], stochastic_depth_prob: float = 0.0,
                 layer_scale: float = 1e-6, num_classes: int = 1000, block: Layer | None = None,
                 norm_layer: Layer | None = None, **kwargs: Any) -> None:  # fmt: skip
        super().__init__()
        if not block_setting:
            raise ValueError("The block_setting should not be empty")
        block = block or CNBlock
        norm_layer = norm_layer or partial(LayerNorm2d, eps=1e-6)
        first = block_setting[0].input_channels
        layers: list[nn.Module] = [
            Conv2dNormActivation(
                3, first, kernel_size=4, stride=4, padding=0, norm_layer=norm_layer, activation_layer=None, bias=True
            )
        ]
        total = sum(cnf.num_layers for cnf in block_setting)
        block_id = 0
        for cnf in block_setting:
            stage: list[nn.Module] = []
            for _ in range(cnf.num_layers):
                sd_prob = stochastic_depth_prob * block_id / (total - 1.0)
                stage.append(block(cnf.input_channels, layer_scale, sd_prob))
                block_id += 1
            layers.append(nn.Sequential(*stage))
            if cnf.out_channels is not None:
                layers.append(
                    nn.Sequential(
                        norm_layer(cnf.input_channels),
                        nn.Conv2d(cnf.input_channels, cnf.out_channels, kernel_size=2, stride=2),
                    )
                )
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        last = block_setting[-1]
        last_out = last.out_channels if last.out_channels is not None else last.input_channels
        self.classifier = nn.Sequential(norm_layer(last_out), nn.Flatten(1), nn.Linear(last_out, num_classes))
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return self.classifier(self.avgpool(self.features(x)))


# (widths, depths, stochastic depth rate)
_VARIANTS = {
    "tiny": ((96, 192, 384, 768), (3, 3, 9, 3), 0.1),
    "small": ((96, 192, 384, 768), (3, 3, 27, 3), 0.4),
    "base": ((128, 256, 512, 1024), (3, 3, 27, 3), 0.5),
    "large": ((192, 384, 768, 1536), (3, 3, 27, 3), 0.5),
}


def _convnext(variant: str, kwargs: dict[str, Any]) -> ConvNeXt:
    widths, depths, sd = _VARIANTS[variant]
    nexts: list[int | None] = [*widths[1:], None]
    setting = [CNBlockConfig(w, n, d) for w, n, d in zip(widths, nexts, depths, strict=True)]
    return ConvNeXt(setting, stochastic_depth_prob=kwargs.pop("stochastic_depth_prob", sd), **kwargs)


def convnext_tiny(**kwargs: Any) -> ConvNeXt:
    """ConvNeXt-T."""
    return _convnext("tiny", kwargs)


def convnext_small(**kwargs: Any) -> ConvNeXt:
    """ConvNeXt-S."""
    return _convnext("small", kwargs)


def convnext_base(**kwargs: Any) -> ConvNeXt:
    """ConvNeXt-B."""
    return _convnext("base", kwargs)


def convnext_large(**kwargs: Any) -> ConvNeXt:
    """ConvNeXt-L."""
    return _convnext("large", kwargs)
