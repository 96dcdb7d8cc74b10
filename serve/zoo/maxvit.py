"""MaxViT (Tu et al., 2022, "Multi-Axis Vision Transformer") as `torchvision.models.maxvit`: maxvit_t.

Each layer is an MBConv (pre-norm, 1x1 expand, depthwise 3x3, squeeze-excite, 1x1 project; the first of a block
strided, its shortcut average-pooled and projected), then block attention (within non-overlapping P x P windows)
and grid attention (over a G x G grid spanning the whole map), each followed by an MLP, pre-LayerNorm and residual.
Attention adds a learned relative position bias and scales keys by the block's feature width (not the head
width) to the -1/2, as torchvision's checkpoints were trained. Feature maps must divide into partitions:
`input_size` is fixed at construction (224 x 224 for maxvit_t). Keys: `stem.0/1`,
`blocks.B.layers.L.layers.MBconv/window_attention/grid_attention...`, `classifier.2/3/5`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

import serve
import serve.nn.functional as F
from serve import nn
from serve.zoo.layers import Conv2dNormActivation, SqueezeExcitation, StochasticDepth
from serve.zoo.swin import _relative_position_index

Layer = Callable[..., nn.Module]


def _conv_out(size: tuple[int, int], kernel: int, stride: int, padding: int) -> tuple[int, int]:
    return (size[0] - kernel + 2 * padding) // stride + 1, (size[1] - kernel + 2 * padding) // stride + 1


class MBConv(nn.Module):
    """Pre-norm inverted bottleneck with squeeze-excite; shortcut avg-pooled (stride 2) and projected (1x1)."""

    def __init__(self, in_channels: int, out_channels: int, expansion_ratio: float, squeeze_ratio: float,
                 stride: int, activation_layer: Layer, norm_layer: Layer,
                 p_stochastic_dropout: float = 0.0) -> None:  # fmt: skip
        super().__init__()
        self.proj: nn.Module
        if stride != 1 or in_channels != out_channels:
            proj: list[nn.Module] = [nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=1, bias=True)]
            if stride == 2:
                proj = [nn.AvgPool2d(kernel_size=3, stride=stride, padding=1), *proj]
            self.proj = nn.Sequential(*proj)
        else:
            self.proj = nn.Identity()
        mid, sqz = int(out_channels * expansion_ratio), int(out_channels * squeeze_ratio)
        self.stochastic_depth: nn.Module = (
            StochasticDepth(p_stochastic_dropout, "row") if p_stochastic_dropout else nn.Identity()
        )
        layers: OrderedDict[str, nn.Module] = OrderedDict()
        layers["pre_norm"] = norm_layer(in_channels)
        layers["conv_a"] = Conv2dNormActivation(in_channels, mid, kernel_size=1, stride=1, padding=0,
                                                activation_layer=activation_layer, norm_layer=norm_layer,
                                                inplace=None)  # fmt: skip
        layers["conv_b"] = Conv2dNormActivation(mid, mid, kernel_size=3, stride=stride, padding=1,
                                                activation_layer=activation_layer, norm_layer=norm_layer, groups=mid,
                                                inplace=None)  # fmt: skip
        layers["squeeze_excitation"] = SqueezeExcitation(mid, sqz, activation=nn.SiLU)
        layers["conv_c"] = nn.Conv2d(mid, out_channels, kernel_size=1, bias=True)
        self.layers = nn.Sequential(layers)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return self.proj(x) + self.stochastic_depth(self.layers(x))


class RelativePositionalMultiHeadAttention(nn.Module):
    """Attention over the P tokens of each partition, plus a learned (2s-1)^2 x heads relative position bias."""

    def __init__(self, feat_dim: int, head_dim: int, max_seq_len: int) -> None:
        super().__init__()
        if feat_dim % head_dim != 0:
            raise ValueError(f"feat_dim: {feat_dim} must be divisible by head_dim: {head_dim}")
        self.n_heads, self.head_dim = feat_dim // head_dim, head_dim
        self.size = int(np.sqrt(max_seq_len))
        self.max_seq_len = max_seq_len
        self.to_qkv = nn.Linear(feat_dim, self.n_heads * self.head_dim * 3)
        self.scale_factor = feat_dim**-0.5
        self.merge = nn.Linear(self.head_dim * self.n_heads, feat_dim)
        self.relative_position_bias_table = nn.Parameter(
            serve.empty(((2 * self.size - 1) * (2 * self.size - 1), self.n_heads), dtype=serve.float32)
        )
        index = _relative_position_index([self.size, self.size]).reshape(max_seq_len, max_seq_len)
        self.register_buffer("relative_position_index", serve.from_numpy(index))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def get_relative_positional_bias(self) -> serve.Tensor:
        n = self.max_seq_len
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        return bias.permute(2, 0, 1).contiguous().unsqueeze(0)  # (1, heads, P, P)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        b, g, p, d = x.shape
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, g, p, self.n_heads, self.head_dim).permute(0, 1, 3, 2, 4) for t in (q, k, v))
        scores = q @ (k * self.scale_factor).transpose(-2, -1)  # (B, G, heads, P, P)
        attn = F.softmax(scores + self.get_relative_positional_bias(), dim=-1)
        out = (attn @ v).permute(0, 1, 3, 2, 4).reshape(b, g, p, d)  # (B, G, P, D)
        return self.merge(out)


class SwapAxes(nn.Module):
    def __init__(self, a: int, b: int) -> None:
        super().__init__()
        self.a, self.b = a, b

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return x.transpose(self.a, self.b)


class WindowPartition(nn.Module):
    """(B, C, H, W) -> (B, H/p * W/p, p*p, C): non-overlapping p x p windows."""

    def forward(self, x: serve.Tensor, p: int) -> serve.Tensor:
        b, c, h, w = x.shape
        x = x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)  # (B, H/p, W/p, p, p, C)
        return x.reshape(b, (h // p) * (w // p), p * p, c)


class WindowDepartition(nn.Module):
    """(B, hp * wp, p*p, C) -> (B, C, hp * p, wp * p)."""

    def forward(self, x: serve.Tensor, p: int, h_partitions: int, w_partitions: int) -> serve.Tensor:
        b, _, _, c = x.shape
        x = x.reshape(b, h_partitions, w_partitions, p, p, c).permute(0, 5, 1, 3, 2, 4)
        return x.reshape(b, c, h_partitions * p, w_partitions * p)


class PartitionAttentionLayer(nn.Module):
    """Block ("window") or grid attention, then an MLP, each pre-LayerNorm with a residual."""

    def __init__(self, in_channels: int, head_dim: int, partition_size: int, partition_type: str,
                 grid_size: tuple[int, int], mlp_ratio: int, activation_layer: Layer, norm_layer: Layer,
                 attention_dropout: float, mlp_dropout: float, p_stochastic_dropout: float) -> None:  # fmt: skip
        super().__init__()
        if partition_type not in ("grid", "window"):
            raise ValueError("partition_type should be either 'grid' or 'window'")
        self.n_heads, self.head_dim = in_channels // head_dim, head_dim
        self.n_partitions = grid_size[0] // partition_size
        self.partition_type, self.grid_size = partition_type, grid_size
        window = partition_type == "window"
        self.p, self.g = (partition_size, self.n_partitions) if window else (self.n_partitions, partition_size)
        self.partition_op = WindowPartition()
        self.departition_op = WindowDepartition()
        self.partition_swap: nn.Module = nn.Identity() if window else SwapAxes(-2, -3)
        self.departition_swap: nn.Module = nn.Identity() if window else SwapAxes(-2, -3)
        self.attn_layer = nn.Sequential(
            norm_layer(in_channels),
            RelativePositionalMultiHeadAttention(in_channels, head_dim, partition_size**2),
            nn.Dropout(attention_dropout),
        )
        self.mlp_layer = nn.Sequential(
            nn.LayerNorm(in_channels), nn.Linear(in_channels, in_channels * mlp_ratio), activation_layer(),
            nn.Linear(in_channels * mlp_ratio, in_channels), nn.Dropout(mlp_dropout),
        )  # fmt: skip
        self.stochastic_dropout = StochasticDepth(p_stochastic_dropout, "row")

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        gh, gw = self.grid_size[0] // self.p, self.grid_size[1] // self.p
        if self.grid_size[0] % self.p or self.grid_size[1] % self.p:
            raise ValueError(f"Grid size {self.grid_size} must be divisible by the partition size {self.p}")
        x = self.partition_swap(self.partition_op(x, self.p))  # (B, G, P, C)
        x = x + self.stochastic_dropout(self.attn_layer(x))
        x = x + self.stochastic_dropout(self.mlp_layer(x))
        return self.departition_op(self.departition_swap(x), self.p, gh, gw)  # (B, C, H, W)


class MaxVitLayer(nn.Module):
    """MBConv, block attention, grid attention (`layers.MBconv`, `.window_attention`, `.grid_attention`)."""

    def __init__(self, in_channels: int, out_channels: int, squeeze_ratio: float, expansion_ratio: float,
                 stride: int, norm_layer: Layer, activation_layer: Layer, head_dim: int, mlp_ratio: int,
                 mlp_dropout: float, attention_dropout: float, p_stochastic_dropout: float, partition_size: int,
                 grid_size: tuple[int, int]) -> None:  # fmt: skip
        super().__init__()
        attn = partial(PartitionAttentionLayer, out_channels, head_dim, partition_size, grid_size=grid_size,
                       mlp_ratio=mlp_ratio, activation_layer=activation_layer, norm_layer=nn.LayerNorm,
                       attention_dropout=attention_dropout, mlp_dropout=mlp_dropout,
                       p_stochastic_dropout=p_stochastic_dropout)  # fmt: skip
        layers: OrderedDict[str, nn.Module] = OrderedDict()
        layers["MBconv"] = MBConv(in_channels, out_channels, expansion_ratio, squeeze_ratio, stride,
                                  activation_layer, norm_layer, p_stochastic_dropout)  # fmt: skip
        layers["window_attention"] = attn(partition_type="window")
        layers["grid_attention"] = attn(partition_type="grid")
        self.layers = nn.Sequential(layers)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return self.layers(x)


class MaxVitBlock(nn.Module):
    """`n_layers` MaxVit layers, the first strided (the grid halves)."""

    def __init__(self, in_channels: int, out_channels: int, squeeze_ratio: float, expansion_ratio: float,
                 norm_layer: Layer, activation_layer: Layer, head_dim: int, mlp_ratio: int, mlp_dropout: float,
                 attention_dropout: float, partition_size: int, input_grid_size: tuple[int, int], n_layers: int,
                 p_stochastic: list[float]) -> None:  # fmt: skip
        super().__init__()
        if len(p_stochastic) != n_layers:
            raise ValueError(f"p_stochastic must have length n_layers={n_layers}, got p_stochastic={p_stochastic}.")
        self.layers = nn.ModuleList()
        self.grid_size = _conv_out(input_grid_size, kernel=3, stride=2, padding=1)
        for idx, p in enumerate(p_stochastic):
            self.layers.append(MaxVitLayer(
                in_channels if idx == 0 else out_channels, out_channels, squeeze_ratio, expansion_ratio,
                2 if idx == 0 else 1, norm_layer, activation_layer, head_dim, mlp_ratio, mlp_dropout,
                attention_dropout, p, partition_size, self.grid_size,
            ))  # fmt: skip

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class MaxVit(nn.Module):
    """torchvision's `MaxVit(input_size, stem_channels, partition_size, block_channels, block_layers, head_dim,
    stochastic_depth_prob, ...)`."""

    def __init__(self, input_size: tuple[int, int], stem_channels: int, partition_size: int,
                 block_channels: Sequence[int], block_layers: Sequence[int], head_dim: int,
                 stochastic_depth_prob: float, norm_layer: Layer | None = None, activation_layer: Layer = nn.GELU,
                 squeeze_ratio: float = 0.25, expansion_ratio: float = 4, mlp_ratio: int = 4,
                 mlp_dropout: float = 0.0, attention_dropout: float = 0.0,
                 num_classes: int = 1000) -> None:  # fmt: skip
        super().__init__()
        norm_layer = norm_layer or partial(nn.BatchNorm2d, eps=1e-3, momentum=0.01)
        grid = _conv_out(tuple(input_size), 3, 2, 1)  # type: ignore[arg-type]
        for _ in block_channels:  # every block halves the grid, which must still divide into partitions
            grid = _conv_out(grid, 3, 2, 1)
            if grid[0] % partition_size or grid[1] % partition_size:
                raise ValueError(f"Input size {input_size} is not divisible by partition size {partition_size} at "
                                 f"every block (grid {grid}): pick an input size that is")  # fmt: skip
        self.stem = nn.Sequential(
            Conv2dNormActivation(3, stem_channels, 3, stride=2, norm_layer=norm_layer,
                                 activation_layer=activation_layer, bias=False, inplace=None),
            Conv2dNormActivation(stem_channels, stem_channels, 3, stride=1, norm_layer=None, activation_layer=None,
                                 bias=True),
        )  # fmt: skip
        size = _conv_out(tuple(input_size), 3, 2, 1)  # type: ignore[arg-type]
        self.partition_size = partition_size
        self.blocks = nn.ModuleList()
        probs = np.linspace(0, stochastic_depth_prob, sum(block_layers)).tolist()
        start = 0
        for in_ch, out_ch, n in zip([stem_channels, *block_channels[:-1]], block_channels, block_layers, strict=True):
            block = MaxVitBlock(in_ch, out_ch, squeeze_ratio, expansion_ratio, norm_layer, activation_layer,
                                head_dim, mlp_ratio, mlp_dropout, attention_dropout, partition_size, size, n,
                                probs[start : start + n])  # fmt: skip
            self.blocks.append(block)
            size, start = block.grid_size, start + n
        self.classifier = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LayerNorm(block_channels[-1]),
            nn.Linear(block_channels[-1], block_channels[-1]), nn.Tanh(),
            nn.Linear(block_channels[-1], num_classes, bias=False),
        )  # fmt: skip
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.classifier(x)


def maxvit_t(**kwargs: Any) -> MaxVit:
    """MaxViT-T: stem 64, blocks 64-128-256-512 x 2-2-5-2, head width 32, partition 7, 224 x 224 input."""
    kwargs.setdefault("input_size", (224, 224))
    kwargs.setdefault("stochastic_depth_prob", 0.2)
    kwargs.setdefault("partition_size", 7)
    channels, layers = [64, 128, 256, 512], [2, 2, 5, 2]
    return MaxVit(stem_channels=64, block_channels=channels, block_layers=layers, head_dim=32, **kwargs)
