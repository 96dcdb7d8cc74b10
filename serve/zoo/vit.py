"""Vision Transformer (Dosovitskiy et al., 2020) as `torchvision.models.vision_transformer`.

Keys follow torchvision: `conv_proj`, `class_token`, `encoder.pos_embedding`, `encoder.layers.encoder_layer_0.ln_1`,
`.self_attention` (an `nn.MultiheadAttention`: `in_proj_weight`, `out_proj`), `.ln_2`, `.mlp.0`, `.mlp.3`,
`encoder.ln`, `heads.head`. vit_b_16/b_32/l_16/l_32/h_14 (`image_size=` as torchvision's).
A small one for tests: `VisionTransformer(32, 8, 2, 4, 64, 128, num_classes=10)`.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Any

import serve
from serve import nn

NormLayer = Callable[[int], nn.Module]
_LAYER_NORM = partial(nn.LayerNorm, eps=1e-6)


class MLPBlock(nn.Sequential):
    """Linear -> GELU -> Dropout -> Linear -> Dropout (torchvision's `MLPBlock`, keys `0` and `3`)."""

    def __init__(self, in_dim: int, mlp_dim: int, dropout: float) -> None:
        super().__init__(
            nn.Linear(in_dim, mlp_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(mlp_dim, in_dim), nn.Dropout(dropout)
        )
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.normal_(m.bias, std=1e-6)


class EncoderBlock(nn.Module):
    """Pre-norm transformer block: x + attention(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(
        self,
        num_heads: int,
        hidden_dim: int,
        mlp_dim: int,
        dropout: float,
        attention_dropout: float,
        norm_layer: NormLayer = _LAYER_NORM,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.ln_1 = norm_layer(hidden_dim)
        self.self_attention = nn.MultiheadAttention(hidden_dim, num_heads, dropout=attention_dropout, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.ln_2 = norm_layer(hidden_dim)
        self.mlp = MLPBlock(hidden_dim, mlp_dim, dropout)

    def forward(self, input: serve.Tensor) -> serve.Tensor:
        if input.dim() != 3:
            raise ValueError(f"Expected (batch_size, seq_length, hidden_dim) got {tuple(input.shape)}")
        x = self.ln_1(input)
        x, _ = self.self_attention(x, x, x, need_weights=False)
        x = self.dropout(x) + input
        return x + self.mlp(self.ln_2(x))


class Encoder(nn.Module):
    """Learned position embedding, the stack of `EncoderBlock`s (`layers.encoder_layer_N`), final LayerNorm."""

    def __init__(
        self,
        seq_length: int,
        num_layers: int,
        num_heads: int,
        hidden_dim: int,
        mlp_dim: int,
        dropout: float,
        attention_dropout: float,
        norm_layer: NormLayer = _LAYER_NORM,
    ) -> None:
        super().__init__()
        self.pos_embedding = nn.Parameter(serve.empty(1, seq_length, hidden_dim).normal_(std=0.02))
        self.dropout = nn.Dropout(dropout)
        blocks = OrderedDict(
            (f"encoder_layer_{i}", EncoderBlock(num_heads, hidden_dim, mlp_dim, dropout, attention_dropout, norm_layer))
            for i in range(num_layers)
        )
        self.layers = nn.Sequential(blocks)
        self.ln = norm_layer(hidden_dim)

    def forward(self, input: serve.Tensor) -> serve.Tensor:
        if input.dim() != 3:
            raise ValueError(f"Expected (batch_size, seq_length, hidden_dim) got {tuple(input.shape)}")
        return self.ln(self.layers(self.dropout(input + self.pos_embedding)))


class VisionTransformer(nn.Module):
    """torchvision's `VisionTransformer(image_size, patch_size, num_layers, num_heads, hidden_dim, mlp_dim, ...)`."""

    def __init__(
        self,
        image_size: int,
        patch_size: int,
        num_layers: int,
        num_heads: int,
        hidden_dim: int,
        mlp_dim: int,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        num_classes: int = 1000,
        representation_size: int | None = None,
        norm_layer: NormLayer = _LAYER_NORM,
    ) -> None:
        super().__init__()
        if image_size % patch_size != 0:
            raise ValueError(f"Input shape indivisible by patch size! image_size={image_size}, patch={patch_size}")
        self.image_size, self.patch_size, self.hidden_dim = image_size, patch_size, hidden_dim
        self.mlp_dim, self.num_classes, self.representation_size = mlp_dim, num_classes, representation_size
        self.attention_dropout, self.dropout, self.norm_layer = attention_dropout, dropout, norm_layer
        self.conv_proj = nn.Conv2d(3, hidden_dim, kernel_size=patch_size, stride=patch_size)
        seq_length = (image_size // patch_size) ** 2 + 1  # + the class token
        self.class_token = nn.Parameter(serve.zeros(1, 1, hidden_dim))
        self.encoder = Encoder(
            seq_length, num_layers, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout, norm_layer
        )
        self.seq_length = seq_length
        heads: OrderedDict[str, nn.Module] = OrderedDict()
        if representation_size is None:
            heads["head"] = nn.Linear(hidden_dim, num_classes)
        else:
            heads["pre_logits"] = nn.Linear(hidden_dim, representation_size)
            heads["act"] = nn.Tanh()
            heads["head"] = nn.Linear(representation_size, num_classes)
        self.heads = nn.Sequential(heads)
        self._init_weights()

    def _init_weights(self) -> None:
        fan_in = self.conv_proj.in_channels * self.conv_proj.kernel_size[0] * self.conv_proj.kernel_size[1]
        nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / fan_in))
        nn.init.zeros_(self.conv_proj.bias)
        if self.representation_size is not None:
            pre_logits = self.heads.pre_logits
            nn.init.trunc_normal_(pre_logits.weight, std=math.sqrt(1 / pre_logits.in_features))
            nn.init.zeros_(pre_logits.bias)
        nn.init.zeros_(self.heads.head.weight)
        nn.init.zeros_(self.heads.head.bias)

    def _process_input(self, x: serve.Tensor) -> serve.Tensor:
        n, _, h, w = x.shape
        if h != self.image_size or w != self.image_size:
            raise ValueError(f"Wrong image size! Expected {self.image_size}x{self.image_size}, got {h}x{w}")
        n_patches = (h // self.patch_size) * (w // self.patch_size)
        x = self.conv_proj(x)  # (N, hidden_dim, n_h, n_w)
        return x.reshape(n, self.hidden_dim, n_patches).permute(0, 2, 1)  # (N, n_h * n_w, hidden_dim)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = self._process_input(x)
        class_token = self.class_token.expand(x.shape[0], -1, -1)  # (N, 1, hidden_dim)
        x = self.encoder(serve.cat([class_token, x], dim=1))  # (N, seq_length, hidden_dim)
        return self.heads(x[:, 0])


def _vit(patch_size: int, num_layers: int, num_heads: int, hidden_dim: int, mlp_dim: int,
         kwargs: dict[str, Any]) -> VisionTransformer:  # fmt: skip
    image_size = kwargs.pop("image_size", 224)
    return VisionTransformer(image_size, patch_size, num_layers, num_heads, hidden_dim, mlp_dim, **kwargs)


def vit_b_16(**kwargs: Any) -> VisionTransformer:
    """ViT-B/16 with torchvision's configuration (`vit_b_16(weights=None)`): 224px, patch 16, 12 x 768, 12 heads."""
    return _vit(16, 12, 12, 768, 3072, kwargs)


def vit_b_32(**kwargs: Any) -> VisionTransformer:
    """ViT-B/32: patch 32, 12 layers x 768, 12 heads, MLP 3072."""
    return _vit(32, 12, 12, 768, 3072, kwargs)


def vit_l_16(**kwargs: Any) -> VisionTransformer:
    """ViT-L/16: patch 16, 24 layers x 1024, 16 heads, MLP 4096."""
    return _vit(16, 24, 16, 1024, 4096, kwargs)


def vit_l_32(**kwargs: Any) -> VisionTransformer:
    """ViT-L/32: patch 32, 24 layers x 1024, 16 heads, MLP 4096."""
    return _vit(32, 24, 16, 1024, 4096, kwargs)


def vit_h_14(**kwargs: Any) -> VisionTransformer:
    """ViT-H/14: patch 14, 32 layers x 1280, 16 heads, MLP 5120."""
    return _vit(14, 32, 16, 1280, 5120, kwargs)
