"""`torchvision.models.detection.ssdlite` on serve, for inference: SSDlite (Sandler et al., 2018) on MobileNetV3-
Large, `ssdlite320_mobilenet_v3_large`, with torchvision's arguments and state_dict keys.

The backbone's features are cut inside the C4 block (after its expansion conv: the first output, 1/16) and run to
the end (the second, 1/32); four extra blocks (1x1, depthwise 3x3 stride 2, 1x1, ReLU6) add four smaller levels.
Each of the six levels gets a depthwise 3x3 + 1x1 prediction block for class logits and one for box deltas, with
6 default boxes per cell. Images are resized to 320 x 320 and normalised with mean = std = 0.5. Without backbone
weights the backbone's tail is reduced (`reduced_tail`), as torchvision's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import serve
from serve import nn
from serve.compat.torchvision.models._utils import _ovewrite_value_param
from serve.compat.torchvision.models.detection._weights import coco_weights
from serve.compat.torchvision.models.detection.anchor_utils import DefaultBoxGenerator
from serve.compat.torchvision.models.detection.backbone_utils import _validate_trainable_layers
from serve.compat.torchvision.models.detection.ssd import SSD, SSDScoringHead
from serve.compat.torchvision.models.mobilenetv3 import MobileNet_V3_Large_Weights, mobilenet_v3_large
from serve.zoo.layers import Conv2dNormActivation

__all__ = ["SSDLite320_MobileNet_V3_Large_Weights", "SSDLiteHead", "ssdlite320_mobilenet_v3_large"]

NormLayer = Callable[..., nn.Module]


def _prediction_block(in_channels: int, out_channels: int, kernel_size: int, norm_layer: NormLayer) -> nn.Sequential:
    return nn.Sequential(
        Conv2dNormActivation(
            in_channels,
            in_channels,
            kernel_size=kernel_size,
            groups=in_channels,
            norm_layer=norm_layer,
            activation_layer=nn.ReLU6,
        ),
        nn.Conv2d(in_channels, out_channels, 1),
    )


def _extra_block(in_channels: int, out_channels: int, norm_layer: NormLayer) -> nn.Sequential:
    mid = out_channels // 2
    return nn.Sequential(
        Conv2dNormActivation(in_channels, mid, kernel_size=1, norm_layer=norm_layer, activation_layer=nn.ReLU6),
        Conv2dNormActivation(
            mid, mid, kernel_size=3, stride=2, groups=mid, norm_layer=norm_layer, activation_layer=nn.ReLU6
        ),
        Conv2dNormActivation(mid, out_channels, kernel_size=1, norm_layer=norm_layer, activation_layer=nn.ReLU6),
    )


class SSDLiteClassificationHead(SSDScoringHead):
    def __init__(self, in_channels: list[int], num_anchors: list[int], num_classes: int, norm_layer: NormLayer
                 ) -> None:  # fmt: skip
        blocks = [_prediction_block(c, num_classes * a, 3, norm_layer) for c, a in zip(in_channels, num_anchors)]
        super().__init__(nn.ModuleList(blocks), num_classes)


class SSDLiteRegressionHead(SSDScoringHead):
    def __init__(self, in_channels: list[int], num_anchors: list[int], norm_layer: NormLayer) -> None:
        blocks = [_prediction_block(c, 4 * a, 3, norm_layer) for c, a in zip(in_channels, num_anchors)]
        super().__init__(nn.ModuleList(blocks), 4)


class SSDLiteHead(nn.Module):
    def __init__(self, in_channels: list[int], num_anchors: list[int], num_classes: int, norm_layer: NormLayer
                 ) -> None:  # fmt: skip
        super().__init__()
        self.classification_head = SSDLiteClassificationHead(in_channels, num_anchors, num_classes, norm_layer)
        self.regression_head = SSDLiteRegressionHead(in_channels, num_anchors, norm_layer)

    def forward(self, x: list[serve.Tensor]) -> dict[str, np.ndarray]:
        return {"bbox_regression": self.regression_head(x), "cls_logits": self.classification_head(x)}


class SSDLiteFeatureExtractorMobileNet(nn.Module):
    def __init__(self, backbone: nn.Sequential, c4_pos: int, norm_layer: NormLayer, width_mult: float = 1.0,
                 min_depth: int = 16) -> None:  # fmt: skip
        super().__init__()
        if backbone[c4_pos].use_res_connect:
            raise ValueError("backbone[c4_pos].use_res_connect should be False")
        c4 = backbone[c4_pos].block
        self.features = nn.Sequential(
            nn.Sequential(*backbone[:c4_pos], c4[0]),  # up to C4's expansion conv (stride 16)
            nn.Sequential(c4[1:], *backbone[c4_pos + 1 :]),  # from C4's depthwise conv to the end (stride 32)
        )
        depth = [max(min_depth, int(d * width_mult)) for d in (512, 256, 256, 128)]
        ins = [backbone[-1].out_channels, *depth[:-1]]
        self.extra = nn.ModuleList([_extra_block(i, o, norm_layer) for i, o in zip(ins, depth)])
        self.out_channels = [c4[0].out_channels, backbone[-1].out_channels, *depth]

    def forward(self, x: serve.Tensor) -> OrderedDict[str, serve.Tensor]:
        outputs = []
        for block in [*self.features, *self.extra]:
            x = block(x)
            outputs.append(x)
        return OrderedDict((str(i), v) for i, v in enumerate(outputs))


def _mobilenet_extractor(
    backbone: Any, trainable_layers: int, norm_layer: NormLayer
) -> SSDLiteFeatureExtractorMobileNet:
    features = backbone.features
    stages = [0] + [i for i, b in enumerate(features) if getattr(b, "_is_cn", False)] + [len(features) - 1]
    if not 0 <= trainable_layers <= len(stages):
        raise ValueError(f"trainable_layers should be in the range [0, {len(stages)}], instead got {trainable_layers}")
    return SSDLiteFeatureExtractorMobileNet(features, stages[-2], norm_layer)


SSDLite320_MobileNet_V3_Large_Weights = coco_weights(
    "SSDLite320_MobileNet_V3_Large_Weights", "ssdlite",
    "https://download.pytorch.org/models/ssdlite320_mobilenet_v3_large_coco-a79551df.pth", 3440060, 21.3,
)  # fmt: skip


def ssdlite320_mobilenet_v3_large(*, weights: Any = None, progress: bool = True, num_classes: int | None = None,
                                  weights_backbone: Any = MobileNet_V3_Large_Weights.IMAGENET1K_V1,  # type: ignore[attr-defined]
                                  trainable_backbone_layers: int | None = None,
                                  norm_layer: NormLayer | None = None, **kwargs: Any) -> SSD:  # fmt: skip
    """SSDlite 320x320 on MobileNetV3-Large (weights only from the local torch hub cache)."""
    weights = SSDLite320_MobileNet_V3_Large_Weights.verify(weights)
    if "size" in kwargs:
        raise ValueError("The size of the model is fixed to 320x320")
    if weights is not None:
        weights_backbone = None
        num_classes = _ovewrite_value_param("num_classes", num_classes, len(weights.meta["categories"]))
    elif num_classes is None:
        num_classes = 91
    trainable = _validate_trainable_layers(weights is not None or weights_backbone is not None,
                                           trainable_backbone_layers, 6, 6)  # fmt: skip
    norm_layer = norm_layer or partial(nn.BatchNorm2d, eps=0.001, momentum=0.03)
    mobilenet = mobilenet_v3_large(weights=weights_backbone, progress=progress, norm_layer=norm_layer,
                                   reduced_tail=weights_backbone is None)  # fmt: skip
    backbone = _mobilenet_extractor(mobilenet, trainable, norm_layer)
    anchors = DefaultBoxGenerator([[2, 3] for _ in range(6)], min_ratio=0.2, max_ratio=0.95)
    head = SSDLiteHead(backbone.out_channels, anchors.num_anchors_per_location(), num_classes, norm_layer)
    defaults = {"score_thresh": 0.001, "nms_thresh": 0.55, "detections_per_img": 300, "topk_candidates": 300,
                "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}  # fmt: skip
    model = SSD(backbone, anchors, (320, 320), num_classes, head=head, **{**defaults, **kwargs})
    if weights is not None:
        model.load_state_dict(weights.get_state_dict(progress=progress))
    return model
