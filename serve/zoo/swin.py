"""Swin Transformer (Liu et al., 2021) and Swin V2 (Liu et al., 2022) as `torchvision.models.swin_transformer`.

Patches of 4x4 embedded, then stages of blocks attending within non-overlapping windows, every second block on
windows shifted by half a window (a cyclic roll, with a mask so tokens attend only to tokens that were neighbours
before the roll), and patch merging (2x2 neighbours concatenated, 4C -> 2C) between stages. Attention adds a
learned relative position bias per head. V2 (the `_v2` builders): cosine attention scaled by a learned, clamped
temperature; the bias from a small MLP over log-spaced relative coordinates (16 * sigmoid); norms after attention
and MLP instead of before; merging normalizes after the reduction. Inputs are (N, 3, H, W); features stay
channels-last. Keys: `features.0.0/2`, `features.S.B.norm1/attn.qkv/attn.proj/attn.relative_position_bias_table/
mlp.0/mlp.3`, `features.S.reduction/norm`, `norm`, `head`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import serve
import serve.nn.functional as F
from serve import nn
from serve.zoo.layers import MLP, Permute, StochasticDepth

Layer = Callable[..., nn.Module]


def _relative_position_index(ws: list[int]) -> np.ndarray:
    """(N*N,) index into the (2*ws0-1)*(2*ws1-1) bias table for every (query, key) pair of a window."""
    hh, ww = np.meshgrid(np.arange(ws[0]), np.arange(ws[1]), indexing="ij")
    coords = np.stack([hh.ravel(), ww.ravel()])  # (2, N)
    rel = coords[:, :, None] - coords[:, None, :]  # (2, N, N)
    return ((rel[0] + ws[0] - 1) * (2 * ws[1] - 1) + rel[1] + ws[1] - 1).ravel().astype(np.int64)


def _shift_mask(pad_h: int, pad_w: int, ws: list[int], shift: list[int]) -> np.ndarray:
    """(windows, N, N): 0 where two tokens of a shifted window were neighbours before the roll, else -100."""
    region = np.zeros((pad_h, pad_w), dtype=np.float32)
    count = 0
    for hs in (slice(0, -ws[0]), slice(-ws[0], -shift[0]), slice(-shift[0], None)):
        for wsl in (slice(0, -ws[1]), slice(-ws[1], -shift[1]), slice(-shift[1], None)):
            region[hs, wsl] = count
            count += 1
    grid = region.reshape(pad_h // ws[0], ws[0], pad_w // ws[1], ws[1]).transpose(0, 2, 1, 3)
    windows = grid.reshape(-1, ws[0] * ws[1])  # (windows, N)
    diff = windows[:, None, :] - windows[:, :, None]
    return np.where(diff != 0, -100.0, 0.0).astype(np.float32)


class ShiftedWindowAttention(nn.Module):
    """Multi-head self-attention within (shifted) windows, with a learned relative position bias table."""

    def __init__(self, dim: int, window_size: list[int], shift_size: list[int], num_heads: int, qkv_bias: bool = True,
                 proj_bias: bool = True, attention_dropout: float = 0.0, dropout: float = 0.0) -> None:  # fmt: skip
        super().__init__()
        if len(window_size) != 2 or len(shift_size) != 2:
            raise ValueError("window_size and shift_size must be of length 2")
        self.window_size, self.shift_size, self.num_heads = list(window_size), list(shift_size), num_heads
        self.attention_dropout, self.dropout = attention_dropout, dropout
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
        self.define_relative_position_bias_table()
        self.register_buffer("relative_position_index", serve.from_numpy(_relative_position_index(self.window_size)))

    def define_relative_position_bias_table(self) -> None:
        size = (2 * self.window_size[0] - 1) * (2 * self.window_size[1] - 1)
        self.relative_position_bias_table = nn.Parameter(serve.zeros(size, self.num_heads))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def get_relative_position_bias(self) -> serve.Tensor:
        return self._bias(self.relative_position_bias_table)

    def _bias(self, table: serve.Tensor) -> serve.Tensor:
        n = self.window_size[0] * self.window_size[1]
        bias = table[self.relative_position_index].view(n, n, -1)  # (N, N, heads)
        return bias.permute(2, 0, 1).contiguous().unsqueeze(0)  # (1, heads, N, N)

    def _scores(self, q: serve.Tensor, k: serve.Tensor, head_dim: int) -> serve.Tensor:
        return (q * head_dim**-0.5) @ k.transpose(-2, -1)

    def _qkv_bias(self) -> serve.Tensor | None:
        return self.qkv.bias

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return self._windows(x, self.get_relative_position_bias())

    def _windows(self, input: serve.Tensor, bias: serve.Tensor) -> serve.Tensor:
        b, h, w, c = input.shape
        ws, shift = self.window_size, list(self.shift_size)
        pad_r, pad_b = (ws[1] - w % ws[1]) % ws[1], (ws[0] - h % ws[0]) % ws[0]
        x = F.pad(input, (0, 0, 0, pad_r, 0, pad_b))
        ph, pw = h + pad_b, w + pad_r
        shift = [0 if ws[0] >= ph else shift[0], 0 if ws[1] >= pw else shift[1]]  # one window: nothing to shift
        if sum(shift) > 0:
            x = serve.roll(x, shifts=(-shift[0], -shift[1]), dims=(1, 2))
        nw, n, heads = (ph // ws[0]) * (pw // ws[1]), ws[0] * ws[1], self.num_heads
        x = x.view(b, ph // ws[0], ws[0], pw // ws[1], ws[1], c).permute(0, 1, 3, 2, 4, 5).reshape(b * nw, n, c)
        qkv = F.linear(x, self.qkv.weight, self._qkv_bias())  # (B*nW, N, 3C)
        qkv = qkv.reshape(b * nw, n, 3, heads, c // heads).permute(2, 0, 3, 1, 4)  # (3, B*nW, heads, N, hd)
        attn = self._scores(qkv[0], qkv[1], c // heads) + bias  # (B*nW, heads, N, N)
        if sum(shift) > 0:
            mask = serve.from_numpy(_shift_mask(ph, pw, ws, shift))  # (nW, N, N)
            attn = (attn.view(b, nw, heads, n, n) + mask.unsqueeze(1).unsqueeze(0)).view(-1, heads, n, n)
        attn = F.dropout(F.softmax(attn, dim=-1), p=self.attention_dropout, training=self.training)
        x = (attn @ qkv[2]).transpose(1, 2).reshape(b * nw, n, c)  # (B*nW, N, C)
        x = F.dropout(self.proj(x), p=self.dropout, training=self.training)
        x = x.view(b, ph // ws[0], pw // ws[1], ws[0], ws[1], c).permute(0, 1, 3, 2, 4, 5).reshape(b, ph, pw, c)
        if sum(shift) > 0:
            x = serve.roll(x, shifts=(shift[0], shift[1]), dims=(1, 2))
        return x[:, :h, :w, :].contiguous()  # (B, H, W, C)


class ShiftedWindowAttentionV2(ShiftedWindowAttention):
    """V2: cosine attention with a learned temperature, continuous (MLP) position bias, no key bias."""

    def __init__(self, dim: int, window_size: list[int], shift_size: list[int], num_heads: int, qkv_bias: bool = True,
                 proj_bias: bool = True, attention_dropout: float = 0.0, dropout: float = 0.0) -> None:  # fmt: skip
        super().__init__(dim, window_size, shift_size, num_heads, qkv_bias, proj_bias, attention_dropout, dropout)
        self.logit_scale = nn.Parameter(serve.log(10 * serve.ones(num_heads, 1, 1)))
        self.cpb_mlp = nn.Sequential(nn.Linear(2, 512, bias=True), nn.ReLU(inplace=True),
                                     nn.Linear(512, num_heads, bias=False))  # fmt: skip
        if qkv_bias:
            length = self.qkv.bias.numel() // 3
            with serve.no_grad():
                self.qkv.bias[length : 2 * length] = 0.0

    def define_relative_position_bias_table(self) -> None:
        ws = self.window_size
        hh, ww = np.meshgrid(np.arange(-(ws[0] - 1), ws[0]), np.arange(-(ws[1] - 1), ws[1]), indexing="ij")
        coords = np.stack([hh / (ws[0] - 1), ww / (ws[1] - 1)], axis=-1)[None].astype(np.float32) * 8
        table = np.sign(coords) * np.log2(np.abs(coords) + 1.0) / 3.0  # log-spaced, in [-1, 1]
        self.register_buffer("relative_coords_table", serve.from_numpy(table.astype(np.float32)))

    def get_relative_position_bias(self) -> serve.Tensor:
        table = self.cpb_mlp(self.relative_coords_table).view(-1, self.num_heads)
        return 16 * serve.sigmoid(self._bias(table))

    def _scores(self, q: serve.Tensor, k: serve.Tensor, head_dim: int) -> serve.Tensor:
        attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        return attn * serve.clamp(self.logit_scale, max=math.log(100.0)).exp()

    def _qkv_bias(self) -> serve.Tensor | None:
        if self.qkv.bias is None:
            return None
        length = self.qkv.bias.numel() // 3
        zero = serve.zeros(length, dtype=self.qkv.bias.dtype)
        return serve.cat([self.qkv.bias[:length], zero, self.qkv.bias[2 * length :]])


class SwinTransformerBlock(nn.Module):
    """x + sd(attn(norm1(x))), then x + sd(mlp(norm2(x)))."""

    def __init__(self, dim: int, num_heads: int, window_size: list[int], shift_size: list[int],
                 mlp_ratio: float = 4.0, dropout: float = 0.0, attention_dropout: float = 0.0,
                 stochastic_depth_prob: float = 0.0, norm_layer: Layer | None = None,
                 attn_layer: Layer = ShiftedWindowAttention) -> None:  # fmt: skip
        super().__init__()
        norm_layer = norm_layer or nn.LayerNorm
        self.norm1 = norm_layer(dim)
        self.attn = attn_layer(dim, window_size, shift_size, num_heads, attention_dropout=attention_dropout,
                               dropout=dropout)  # fmt: skip
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
        self.norm2 = norm_layer(dim)
        self.mlp = MLP(dim, [int(dim * mlp_ratio), dim], activation_layer=nn.GELU, inplace=None, dropout=dropout)
        for m in self.mlp.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.normal_(m.bias, std=1e-6)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = x + self.stochastic_depth(self.attn(self.norm1(x)))
        return x + self.stochastic_depth(self.mlp(self.norm2(x)))


class SwinTransformerBlockV2(SwinTransformerBlock):
    """Post-norm: x + sd(norm1(attn(x))), then x + sd(norm2(mlp(x)))."""

    def __init__(self, dim: int, num_heads: int, window_size: list[int], shift_size: list[int],
                 mlp_ratio: float = 4.0, dropout: float = 0.0, attention_dropout: float = 0.0,
                 stochastic_depth_prob: float = 0.0, norm_layer: Layer | None = None,
                 attn_layer: Layer = ShiftedWindowAttentionV2) -> None:  # fmt: skip
        super().__init__(dim, num_heads, window_size, shift_size, mlp_ratio, dropout, attention_dropout,
                         stochastic_depth_prob, norm_layer, attn_layer)  # fmt: skip

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = x + self.stochastic_depth(self.norm1(self.attn(x)))
        return x + self.stochastic_depth(self.norm2(self.mlp(x)))


def _merge(x: serve.Tensor) -> serve.Tensor:
    """(B, H, W, C) -> (B, H/2, W/2, 4C): each 2x2 neighbourhood concatenated (padded to even sizes)."""
    h, w = x.shape[-3], x.shape[-2]
    x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
    return serve.cat([x[..., 0::2, 0::2, :], x[..., 1::2, 0::2, :], x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :]], -1)


class PatchMerging(nn.Module):
    """2x2 merge, LayerNorm(4C), Linear 4C -> 2C (no bias)."""

    def __init__(self, dim: int, norm_layer: Layer = nn.LayerNorm) -> None:
        super().__init__()
        self.dim = dim
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = norm_layer(4 * dim)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return self.reduction(self.norm(_merge(x)))


class PatchMergingV2(nn.Module):
    """2x2 merge, Linear 4C -> 2C (no bias), LayerNorm(2C)."""

    def __init__(self, dim: int, norm_layer: Layer = nn.LayerNorm) -> None:
        super().__init__()
        self.dim = dim
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = norm_layer(2 * dim)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return self.norm(self.reduction(_merge(x)))


class SwinTransformer(nn.Module):
    """torchvision's `SwinTransformer(patch_size, embed_dim, depths, num_heads, window_size, ...)`."""

    def __init__(self, patch_size: list[int], embed_dim: int, depths: list[int], num_heads: list[int],
                 window_size: list[int], mlp_ratio: float = 4.0, dropout: float = 0.0,
                 attention_dropout: float = 0.0, stochastic_depth_prob: float = 0.1, num_classes: int = 1000,
                 norm_layer: Layer | None = None, block: Layer | None = None,
                 downsample_layer: Layer = PatchMerging) -> None:  # fmt: skip
        super().__init__()
        self.num_classes = num_classes
        block = block or SwinTransformerBlock
        norm_layer = norm_layer or partial(nn.LayerNorm, eps=1e-5)
        layers: list[nn.Module] = [nn.Sequential(
            nn.Conv2d(3, embed_dim, kernel_size=(patch_size[0], patch_size[1]),
                      stride=(patch_size[0], patch_size[1])),
            Permute([0, 2, 3, 1]),  # (N, H/4, W/4, C): channels last from here on
            norm_layer(embed_dim),
        )]  # fmt: skip
        total, block_id = sum(depths), 0
        for i, depth in enumerate(depths):
            dim = embed_dim * 2**i
            stage: list[nn.Module] = []
            for j in range(depth):
                sd_prob = stochastic_depth_prob * float(block_id) / (total - 1)
                shift = [0 if j % 2 == 0 else s // 2 for s in window_size]
                stage.append(block(dim, num_heads[i], window_size=window_size, shift_size=shift,
                                   mlp_ratio=mlp_ratio, dropout=dropout, attention_dropout=attention_dropout,
                                   stochastic_depth_prob=sd_prob, norm_layer=norm_layer))  # fmt: skip
                block_id += 1
            layers.append(nn.Sequential(*stage))
            if i < len(depths) - 1:
                layers.append(downsample_layer(dim, norm_layer))
        self.features = nn.Sequential(*layers)
        num_features = embed_dim * 2 ** (len(depths) - 1)
        self.norm = norm_layer(num_features)
        self.permute = Permute([0, 3, 1, 2])  # (N, C, H, W)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten(1)
        self.head = nn.Linear(num_features, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Linear) and m is self.head:
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = self.permute(self.norm(self.features(x)))
        return self.head(self.flatten(self.avgpool(x)))


_V1 = {"t": (96, [2, 2, 6, 2], [3, 6, 12, 24], 0.2), "s": (96, [2, 2, 18, 2], [3, 6, 12, 24], 0.3),
       "b": (128, [2, 2, 18, 2], [4, 8, 16, 32], 0.5)}  # fmt: skip


def _swin(size: str, v2: bool, kwargs: dict[str, Any]) -> SwinTransformer:
    embed_dim, depths, heads, sd = _V1[size]
    extra: dict[str, Any] = {"block": SwinTransformerBlockV2, "downsample_layer": PatchMergingV2} if v2 else {}
    sd = kwargs.pop("stochastic_depth_prob", sd)
    window = [8, 8] if v2 else [7, 7]
    return SwinTransformer([4, 4], embed_dim, depths, heads, window, stochastic_depth_prob=sd, **extra, **kwargs)


def swin_t(**kwargs: Any) -> SwinTransformer:
    """Swin-T: 96 channels, depths 2-2-6-2, window 7."""
    return _swin("t", False, kwargs)


def swin_s(**kwargs: Any) -> SwinTransformer:
    """Swin-S: 96 channels, depths 2-2-18-2, window 7."""
    return _swin("s", False, kwargs)


def swin_b(**kwargs: Any) -> SwinTransformer:
    """Swin-B: 128 channels, depths 2-2-18-2, window 7."""
    return _swin("b", False, kwargs)


def swin_v2_t(**kwargs: Any) -> SwinTransformer:
    """Swin V2-T: window 8."""
    return _swin("t", True, kwargs)


def swin_v2_s(**kwargs: Any) -> SwinTransformer:
    """Swin V2-S: window 8."""
    return _swin("s", True, kwargs)


def swin_v2_b(**kwargs: Any) -> SwinTransformer:
    """Swin V2-B: window 8."""
    return _swin("b", True, kwargs)
