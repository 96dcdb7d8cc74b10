"""`torchvision.models.convnext` on serve: ConvNeXt (definitions in serve.zoo.convnext), builders and weights enums."""

from __future__ import annotations

from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import convnext as _zoo
from serve.zoo.convnext import CNBlock, CNBlockConfig, ConvNeXt, LayerNorm2d

ConvNeXt_Tiny_Weights = weights_enum("convnext_tiny", __name__)
ConvNeXt_Small_Weights = weights_enum("convnext_small", __name__)
ConvNeXt_Base_Weights = weights_enum("convnext_base", __name__)
ConvNeXt_Large_Weights = weights_enum("convnext_large", __name__)

convnext_tiny = model_builder("convnext_tiny", _zoo.convnext_tiny, __name__)
convnext_small = model_builder("convnext_small", _zoo.convnext_small, __name__)
convnext_base = model_builder("convnext_base", _zoo.convnext_base, __name__)
convnext_large = model_builder("convnext_large", _zoo.convnext_large, __name__)

__all__ = [
    "CNBlock",
    "CNBlockConfig",
    "ConvNeXt",
    "ConvNeXt_Base_Weights",
    "ConvNeXt_Large_Weights",
    "ConvNeXt_Small_Weights",
    "ConvNeXt_Tiny_Weights",
    "LayerNorm2d",
    "convnext_base",
    "convnext_large",
    "convnext_small",
    "convnext_tiny",
]
