"""`torchvision.models.segmentation.lraspp` on serve: LRASPP, LRASPPHead (serve.zoo.segmentation), builder, weights."""

from __future__ import annotations

from typing import Any

from serve.compat.torchvision.models.mobilenetv3 import MobileNet_V3_Large_Weights, mobilenet_v3_large
from serve.compat.torchvision.models.segmentation._weights import LRASPP_MobileNet_V3_Large_Weights, load, resolve
from serve.zoo.segmentation import LRASPP, LRASPPHead, mobilenet_lraspp

__all__ = ["LRASPP", "LRASPPHead", "LRASPP_MobileNet_V3_Large_Weights", "lraspp_mobilenet_v3_large"]


def lraspp_mobilenet_v3_large(*, weights: Any = None, progress: bool = True, num_classes: int | None = None,
                              weights_backbone: Any = MobileNet_V3_Large_Weights.IMAGENET1K_V1,  # type: ignore[attr-defined]
                              **kwargs: Any) -> LRASPP:  # fmt: skip
    """Lite R-ASPP on a dilated MobileNetV3-Large (no auxiliary head: aux_loss is refused, as torchvision)."""
    if kwargs.pop("aux_loss", None):
        raise NotImplementedError("This model does not use auxiliary loss")
    weights, weights_backbone, num_classes, _ = resolve(
        LRASPP_MobileNet_V3_Large_Weights, weights, weights_backbone, num_classes, None, kwargs
    )
    backbone = mobilenet_v3_large(weights=weights_backbone, dilated=True)
    return load(mobilenet_lraspp(backbone, num_classes), weights, progress)  # type: ignore[no-any-return]
