"""`torchvision.models.swin_transformer` on serve: Swin Transformer V1 and V2
(definitions in serve.zoo.swin), builders and weights enums."""

from __future__ import annotations

from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import swin as _zoo
from serve.zoo.swin import (
    PatchMerging,
    PatchMergingV2,
    ShiftedWindowAttention,
    ShiftedWindowAttentionV2,
    SwinTransformer,
    SwinTransformerBlock,
    SwinTransformerBlockV2,
)

Swin_T_Weights = weights_enum("swin_t", __name__)
Swin_S_Weights = weights_enum("swin_s", __name__)
Swin_B_Weights = weights_enum("swin_b", __name__)
Swin_V2_T_Weights = weights_enum("swin_v2_t", __name__)
Swin_V2_S_Weights = weights_enum("swin_v2_s", __name__)
Swin_V2_B_Weights = weights_enum("swin_v2_b", __name__)

swin_t = model_builder("swin_t", _zoo.swin_t, __name__)
swin_s = model_builder("swin_s", _zoo.swin_s, __name__)
swin_b = model_builder("swin_b", _zoo.swin_b, __name__)
swin_v2_t = model_builder("swin_v2_t", _zoo.swin_v2_t, __name__)
swin_v2_s = model_builder("swin_v2_s", _zoo.swin_v2_s, __name__)
swin_v2_b = model_builder("swin_v2_b", _zoo.swin_v2_b, __name__)

__all__ = ["PatchMerging", "PatchMergingV2", "ShiftedWindowAttention", "ShiftedWindowAttentionV2",
           "SwinTransformer", "SwinTransformerBlock", "SwinTransformerBlockV2", "Swin_B_Weights", "Swin_S_Weights",
           "Swin_T_Weights", "Swin_V2_B_Weights", "Swin_V2_S_Weights", "Swin_V2_T_Weights", "swin_b", "swin_s",
           "swin_t", "swin_v2_b", "swin_v2_s", "swin_v2_t"]  # fmt: skip
