"""`torchvision.models.maxvit` on serve: MaxViT (definitions in serve.zoo.maxvit), builder and weights enum."""

from __future__ import annotations

from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import maxvit as _zoo
from serve.zoo.maxvit import (
    MaxVit,
    MaxVitBlock,
    MaxVitLayer,
    MBConv,
    PartitionAttentionLayer,
    RelativePositionalMultiHeadAttention,
)

MaxVit_T_Weights = weights_enum("maxvit_t", __name__)

maxvit_t = model_builder("maxvit_t", _zoo.maxvit_t, __name__)

__all__ = ["MBConv", "MaxVit", "MaxVitBlock", "MaxVitLayer", "MaxVit_T_Weights", "PartitionAttentionLayer",
           "RelativePositionalMultiHeadAttention", "maxvit_t"]  # fmt: skip
