"""`torchvision.models.detection.mask_rcnn` on serve, for inference: MaskRCNN (Faster R-CNN plus a mask branch),
MaskRCNNHeads, MaskRCNNPredictor and the `maskrcnn_resnet50_fpn` builder, with torchvision's arguments and
state_dict keys (TorchServe's maskrcnn example subclasses MaskRCNN over `resnet_fpn_backbone('resnet50', False)`).

In eval mode each image's dict also holds "masks" (K, 1, H, W) float32 in [0, 1], in input pixels: the mask branch
pools every detected box at 14 x 14 (MultiScaleRoIAlign, sampling ratio 2), runs four 3x3 convolutions, a stride-2
transposed convolution to 28 x 28 and a 1x1 convolution to one map per class; the detected class's map goes through
a sigmoid (roi_heads.py) and is pasted into the image at its box (transform.py, torchvision's paste_masks_in_image).
Checkpoints with the pre-0.8 mask head names (`mask_fcn1..4`, torchvision's version 1 of MaskRCNNHeads) load, as
they do in torchvision.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from serve import nn
from serve.compat.torchvision.models.detection._weights import coco_weights
from serve.compat.torchvision.models.detection.backbone_utils import _resnet50_fpn_detector
from serve.compat.torchvision.models.detection.faster_rcnn import FasterRCNN
from serve.compat.torchvision.models.resnet import ResNet50_Weights
from serve.compat.torchvision.ops.poolers import MultiScaleRoIAlign
from serve.zoo.layers import Conv2dNormActivation

__all__ = ["MaskRCNN", "MaskRCNNHeads", "MaskRCNNPredictor", "MaskRCNN_ResNet50_FPN_Weights", "maskrcnn_resnet50_fpn"]


class MaskRCNNHeads(nn.Sequential):
    """Conv 3x3 + ReLU blocks (keys `<i>.0.weight`), as torchvision's version 2 of this module."""

    _version = 2

    def __init__(self, in_channels: int, layers: tuple[int, ...] | list[int], dilation: int,
                 norm_layer: Callable[..., nn.Module] | None = None) -> None:  # fmt: skip
        blocks, features = [], in_channels
        for width in layers:
            blocks.append(Conv2dNormActivation(features, width, kernel_size=3, stride=1, padding=dilation,
                                               dilation=dilation, norm_layer=norm_layer))  # fmt: skip
            features = width
        super().__init__(*blocks)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, local_metadata: dict, strict: bool,
                              missing_keys: list[str], unexpected_keys: list[str], error_msgs: list[str]
                              ) -> None:  # fmt: skip
        if (local_metadata.get("version") or 1) < 2:  # mask_fcn1.weight -> 0.0.weight
            for i in range(len(self)):
                for kind in ("weight", "bias"):
                    old = f"{prefix}mask_fcn{i + 1}.{kind}"
                    if old in state_dict:
                        state_dict[f"{prefix}{i}.0.{kind}"] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)  # fmt: skip


class MaskRCNNPredictor(nn.Sequential):
    def __init__(self, in_channels: int, dim_reduced: int, num_classes: int) -> None:
        super().__init__(OrderedDict([
            ("conv5_mask", nn.ConvTranspose2d(in_channels, dim_reduced, 2, 2, 0)),  # (R, C, 14, 14) -> (R, C, 28, 28)
            ("relu", nn.ReLU(inplace=True)),
            ("mask_fcn_logits", nn.Conv2d(dim_reduced, num_classes, 1, 1, 0)),  # (R, classes, 28, 28)
        ]))  # fmt: skip


class MaskRCNN(FasterRCNN):
    def __init__(self, backbone: nn.Module, num_classes: int | None = None, *args: Any,
                 mask_roi_pool: MultiScaleRoIAlign | None = None, mask_head: nn.Module | None = None,
                 mask_predictor: nn.Module | None = None, **kwargs: Any) -> None:  # fmt: skip
        if not isinstance(mask_roi_pool, (MultiScaleRoIAlign, type(None))):
            raise TypeError(
                f"mask_roi_pool should be of type MultiScaleRoIAlign or None instead of {type(mask_roi_pool)}"
            )
        if num_classes is not None and mask_predictor is not None:
            raise ValueError("num_classes should be None when mask_predictor is specified")
        out_channels = backbone.out_channels
        mask_roi_pool = mask_roi_pool or MultiScaleRoIAlign(["0", "1", "2", "3"], output_size=14, sampling_ratio=2)
        mask_head = mask_head or MaskRCNNHeads(out_channels, (256, 256, 256, 256), 1)
        mask_predictor = mask_predictor or MaskRCNNPredictor(256, 256, num_classes)  # type: ignore[arg-type]
        super().__init__(backbone, num_classes, *args, **kwargs)
        self.roi_heads.mask_roi_pool = mask_roi_pool
        self.roi_heads.mask_head = mask_head
        self.roi_heads.mask_predictor = mask_predictor


MaskRCNN_ResNet50_FPN_Weights = coco_weights(
    "MaskRCNN_ResNet50_FPN_Weights", "mask_rcnn",
    "https://download.pytorch.org/models/maskrcnn_resnet50_fpn_coco-bf2d0c1e.pth", 44401393, 37.9,
)  # fmt: skip


def maskrcnn_resnet50_fpn(*, weights: Any = None, progress: bool = True, num_classes: int | None = None,
                          weights_backbone: Any = ResNet50_Weights.IMAGENET1K_V1,  # type: ignore[attr-defined]
                          trainable_backbone_layers: int | None = None, **kwargs: Any) -> MaskRCNN:  # fmt: skip
    """Mask R-CNN with a ResNet-50-FPN backbone (weights only from the local torch hub cache)."""
    return _resnet50_fpn_detector(MaskRCNN, MaskRCNN_ResNet50_FPN_Weights, weights, progress, num_classes,
                                  weights_backbone, trainable_backbone_layers, kwargs)  # fmt: skip
