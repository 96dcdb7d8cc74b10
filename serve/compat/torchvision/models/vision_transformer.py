"""`torchvision.models.vision_transformer` on serve: Vision Transformer
(definitions in serve.zoo.vit), builders and weights enums."""

from __future__ import annotations

from serve.compat.torchvision.models._adjust import image_size_of
from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import vit as _zoo
from serve.zoo.vit import Encoder, EncoderBlock, MLPBlock, VisionTransformer

ViT_B_16_Weights = weights_enum("vit_b_16", __name__)
ViT_B_32_Weights = weights_enum("vit_b_32", __name__)
ViT_L_16_Weights = weights_enum("vit_l_16", __name__)
ViT_L_32_Weights = weights_enum("vit_l_32", __name__)
ViT_H_14_Weights = weights_enum("vit_h_14", __name__)

vit_b_16 = model_builder("vit_b_16", _zoo.vit_b_16, __name__, prepare=image_size_of)
vit_b_32 = model_builder("vit_b_32", _zoo.vit_b_32, __name__, prepare=image_size_of)
vit_l_16 = model_builder("vit_l_16", _zoo.vit_l_16, __name__, prepare=image_size_of)
vit_l_32 = model_builder("vit_l_32", _zoo.vit_l_32, __name__, prepare=image_size_of)
vit_h_14 = model_builder("vit_h_14", _zoo.vit_h_14, __name__, prepare=image_size_of)

__all__ = [
    "Encoder",
    "EncoderBlock",
    "MLPBlock",
    "ViT_B_16_Weights",
    "ViT_B_32_Weights",
    "ViT_H_14_Weights",
    "ViT_L_16_Weights",
    "ViT_L_32_Weights",
    "VisionTransformer",
    "vit_b_16",
    "vit_b_32",
    "vit_h_14",
    "vit_l_16",
    "vit_l_32",
]
