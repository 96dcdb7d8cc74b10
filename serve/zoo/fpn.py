"""Feature Pyramid Network (Lin et al., 2017) as `torchvision.ops.FeaturePyramidNetwork`, with its extra blocks.

Each input level gets a 1x1 lateral conv (`inner_blocks.i.0`); from the coarsest level down, the running top-down
map is upsampled (nearest) to the next level's size and added to its lateral; every sum gets a 3x3 conv
(`layer_blocks.i.0`). LastLevelMaxPool adds a "pool" level: the coarsest output subsampled by 2 (max_pool 1x1,
stride 2); LastLevelP6P7 (RetinaNet) adds "p6" and "p7" by strided 3x3 convs. Checkpoints from before
torchvision 0.13 name the convs `inner_blocks.i.weight`; they are renamed on load.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import serve
import serve.nn.functional as F
from serve import nn
from serve.zoo.layers import Conv2dNormActivation


class ExtraFPNBlock(nn.Module):
    """Base of the blocks that add levels after the FPN: forward(results, inputs, names) -> (results, names)."""


class LastLevelMaxPool(ExtraFPNBlock):
    def forward(self, x: list[serve.Tensor], y: list[serve.Tensor], names: list[str]
                ) -> tuple[list[serve.Tensor], list[str]]:  # fmt: skip
        return [*x, F.max_pool2d(x[-1], 1, 2, 0)], [*names, "pool"]


def _rename_legacy(state_dict: dict, prefix: str, blocks: str, count: int) -> None:
    for i in range(count):
        for kind in ("weight", "bias"):
            old, new = f"{prefix}{blocks}.{i}.{kind}", f"{prefix}{blocks}.{i}.0.{kind}"
            if old in state_dict and new not in state_dict:
                state_dict[new] = state_dict.pop(old)


class FeaturePyramidNetwork(nn.Module):
    def __init__(self, in_channels_list: list[int], out_channels: int, extra_blocks: ExtraFPNBlock | None = None,
                 norm_layer: Callable[..., nn.Module] | None = None) -> None:  # fmt: skip
        super().__init__()
        self.inner_blocks = nn.ModuleList()
        self.layer_blocks = nn.ModuleList()
        for in_channels in in_channels_list:
            if in_channels == 0:
                raise ValueError("in_channels=0 is currently not supported")
            self.inner_blocks.append(Conv2dNormActivation(in_channels, out_channels, kernel_size=1, padding=0,
                                                          norm_layer=norm_layer, activation_layer=None))  # fmt: skip
            self.layer_blocks.append(Conv2dNormActivation(out_channels, out_channels, kernel_size=3,
                                                          norm_layer=norm_layer, activation_layer=None))  # fmt: skip
        self.extra_blocks = extra_blocks

    def _load_from_state_dict(self, state_dict: dict, prefix: str, local_metadata: dict, strict: bool,
                              missing_keys: list[str], unexpected_keys: list[str], error_msgs: list[str]
                              ) -> None:  # fmt: skip
        for blocks in ("inner_blocks", "layer_blocks"):
            _rename_legacy(state_dict, prefix, blocks, len(self.inner_blocks))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)  # fmt: skip

    def forward(self, x: dict[str, serve.Tensor]) -> OrderedDict[str, serve.Tensor]:
        names, feats = list(x.keys()), list(x.values())
        last_inner = self.inner_blocks[-1](feats[-1])
        results = [self.layer_blocks[-1](last_inner)]
        for idx in range(len(feats) - 2, -1, -1):
            lateral = self.inner_blocks[idx](feats[idx])
            top_down = F.interpolate(last_inner, size=tuple(lateral.shape[-2:]), mode="nearest")
            last_inner = lateral + top_down
            results.insert(0, self.layer_blocks[idx](last_inner))
        if self.extra_blocks is not None:
            results, names = self.extra_blocks(results, feats, names)
        return OrderedDict(zip(names, results))


class LastLevelP6P7(ExtraFPNBlock):
    """RetinaNet's extra levels: P6 = 3x3 stride-2 conv of P5 (or of C5 when the channel counts differ), P7 = the
    same on ReLU(P6); named "p6" and "p7"."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.p6 = nn.Conv2d(in_channels, out_channels, 3, 2, 1)
        self.p7 = nn.Conv2d(out_channels, out_channels, 3, 2, 1)
        self.use_P5 = in_channels == out_channels

    def forward(self, p: list[serve.Tensor], c: list[serve.Tensor], names: list[str]
                ) -> tuple[list[serve.Tensor], list[str]]:  # fmt: skip
        p6 = self.p6(p[-1] if self.use_P5 else c[-1])
        p7 = self.p7(F.relu(p6))
        return [*p, p6, p7], [*names, "p6", "p7"]
