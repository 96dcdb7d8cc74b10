"""The detection weights enums (torchvision's published COCO checkpoints, read only from the local torch hub
cache) and their evaluation preset (`ObjectDetection`: image to float in [0, 1]; the model resizes itself)."""

from __future__ import annotations

from typing import Any

import serve
from serve.compat.torchvision.models._api import Weights, WeightsEnum
from serve.compat.torchvision.models.detection._coco import COCO_CATEGORIES


class ObjectDetection:
    """PIL image or uint8 tensor -> float32 (C, H, W) in [0, 1]."""

    def __call__(self, img: Any) -> serve.Tensor:
        from serve.compat.torchvision.transforms import functional as TF

        if not isinstance(img, serve.Tensor):
            img = TF.pil_to_tensor(img)
        return TF.convert_image_dtype(img, serve.float32)

    def __repr__(self) -> str:
        return "ObjectDetection()"


def coco_weights(enum_name: str, module: str, url: str, num_params: int, box_map: float) -> Any:
    meta = {"categories": COCO_CATEGORIES, "min_size": (1, 1), "num_params": num_params,
            "_metrics": {"COCO-val2017": {"box_map": box_map}}}  # fmt: skip
    weights = Weights(url, ObjectDetection, meta)
    make: Any = WeightsEnum
    return make(
        enum_name, [("COCO_V1", weights), ("DEFAULT", weights)], module=f"torchvision.models.detection.{module}"
    )
