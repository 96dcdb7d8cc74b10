"""The segmentation weights enums, their evaluation preset (`SemanticSegmentation`) and the builders' shared
argument handling, as torchvision's.

Weights are torchvision's published COCO-trained checkpoints with the 20 Pascal VOC categories plus background;
like the classification weights they are read only from the local torch hub cache (`WeightsEnum.get_state_dict`),
never downloaded. Facts (URLs, sizes, scores) are torchvision 0.28's public ones.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from functools import partial
from typing import Any

import serve
from serve.compat.torchvision.models._api import Weights, WeightsEnum
from serve.compat.torchvision.models._utils import _ovewrite_value_param
from serve.compat.torchvision.transforms import functional as F
from serve.compat.torchvision.transforms._mode import InterpolationMode, interpolation_mode

VOC_CATEGORIES = ["__background__", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair",
                  "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train",
                  "tvmonitor"]  # fmt: skip


class SemanticSegmentation:
    """Preset: resize the shorter side to `resize_size` (no crop), to float in [0, 1], normalize (ImageNet)."""

    def __init__(self, *, resize_size: int | None, mean: Sequence[float] = (0.485, 0.456, 0.406),
                 std: Sequence[float] = (0.229, 0.224, 0.225), interpolation: Any = InterpolationMode.BILINEAR,
                 antialias: bool | None = True) -> None:  # fmt: skip
        self.resize_size = [resize_size] if resize_size is not None else None
        self.mean, self.std = list(mean), list(std)
        self.interpolation = interpolation_mode(interpolation)
        self.antialias = antialias

    def __call__(self, img: Any) -> serve.Tensor:
        if self.resize_size is not None:
            img = F.resize(img, self.resize_size, interpolation=self.interpolation, antialias=self.antialias)
        if not isinstance(img, serve.Tensor):
            img = F.pil_to_tensor(img)
        img = F.convert_image_dtype(img, serve.float32)
        return F.normalize(img, mean=self.mean, std=self.std)

    forward = __call__

    def __repr__(self) -> str:
        fields = f"resize_size={self.resize_size}", f"mean={self.mean}", f"std={self.std}", \
            f"interpolation={self.interpolation}"  # fmt: skip
        return f"{type(self).__name__}(" + "".join(f"\n    {f}" for f in fields) + "\n)"


def _enum(name: str, module: str, url: str, num_params: int, miou: float, pixel_acc: float) -> Any:
    meta = {"categories": VOC_CATEGORIES, "min_size": (1, 1), "num_params": num_params,
            "_metrics": {"COCO-val2017-VOC-labels": {"miou": miou, "pixel_acc": pixel_acc}}}  # fmt: skip
    weights = Weights(url, partial(SemanticSegmentation, resize_size=520), meta)
    make: Any = WeightsEnum
    return make(name, [("COCO_WITH_VOC_LABELS_V1", weights), ("DEFAULT", weights)], module=module)


_URL = "https://download.pytorch.org/models/"
FCN_ResNet50_Weights = _enum("FCN_ResNet50_Weights", "torchvision.models.segmentation.fcn",
                             _URL + "fcn_resnet50_coco-1167a1af.pth", 35322218, 60.5, 91.4)  # fmt: skip
FCN_ResNet101_Weights = _enum("FCN_ResNet101_Weights", "torchvision.models.segmentation.fcn",
                              _URL + "fcn_resnet101_coco-7ecb50ca.pth", 54314346, 63.7, 91.9)  # fmt: skip
DeepLabV3_ResNet50_Weights = _enum("DeepLabV3_ResNet50_Weights", "torchvision.models.segmentation.deeplabv3",
                                   _URL + "deeplabv3_resnet50_coco-cd0a2569.pth", 42004074, 66.4, 92.4)  # fmt: skip
DeepLabV3_ResNet101_Weights = _enum("DeepLabV3_ResNet101_Weights", "torchvision.models.segmentation.deeplabv3",
                                    _URL + "deeplabv3_resnet101_coco-586e9e4e.pth", 60996202, 67.4, 92.4)  # fmt: skip
DeepLabV3_MobileNet_V3_Large_Weights = _enum(
    "DeepLabV3_MobileNet_V3_Large_Weights", "torchvision.models.segmentation.deeplabv3",
    _URL + "deeplabv3_mobilenet_v3_large-fc3c493d.pth", 11029328, 60.3, 91.2,
)  # fmt: skip
LRASPP_MobileNet_V3_Large_Weights = _enum(
    "LRASPP_MobileNet_V3_Large_Weights", "torchvision.models.segmentation.lraspp",
    _URL + "lraspp_mobilenet_v3_large-d234d4ea.pth", 3221538, 57.9, 91.2,
)  # fmt: skip


def resolve(enum: Any, weights: Any, weights_backbone: Any, num_classes: int | None, aux_loss: bool | None,
            kwargs: dict[str, Any]) -> tuple[Any, Any, int, bool]:  # fmt: skip
    """(weights, weights_backbone, num_classes, aux_loss) by torchvision's rules: named weights fix 21 classes and
    the auxiliary head and need no backbone weights; the legacy `pretrained`/`pretrained_backbone` are accepted."""
    if "pretrained" in kwargs:
        warnings.warn("'pretrained' is deprecated, use 'weights' instead", UserWarning, stacklevel=3)
        if kwargs.pop("pretrained") and weights is None:
            weights = enum.DEFAULT
    if "pretrained_backbone" in kwargs:
        warnings.warn("'pretrained_backbone' is deprecated, use 'weights_backbone' instead", UserWarning, stacklevel=3)
        if not kwargs.pop("pretrained_backbone"):
            weights_backbone = None
    if kwargs:
        raise TypeError(f"unexpected keyword arguments {sorted(kwargs)}")
    weights = enum.verify(weights)
    if weights is not None:
        weights_backbone = None
        num_classes = _ovewrite_value_param("num_classes", num_classes, len(weights.meta["categories"]))
        aux_loss = _ovewrite_value_param("aux_loss", aux_loss, True)
    elif num_classes is None:
        num_classes = 21
    return weights, weights_backbone, int(num_classes), bool(aux_loss)


def load(model: Any, weights: Any, progress: bool) -> Any:
    if weights is not None:
        model.load_state_dict(weights.get_state_dict(progress=progress))
    return model
