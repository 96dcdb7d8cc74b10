"""`torchvision.ops` on serve: box operations (nms, batched_nms, box_iou, ...), RoI pooling (roi_align, roi_pool,
MultiScaleRoIAlign), FeaturePyramidNetwork and the shared layers (FrozenBatchNorm2d, Conv2dNormActivation,
SqueezeExcitation, StochasticDepth, MLP).

torchvision implements nms and the RoI ops in compiled C++/CUDA; here they are numpy on the tensors' arrays
(CPU, no autograd: they serve inference), following the algorithms' published definitions.
"""

from __future__ import annotations

from serve.compat.torchvision.ops import boxes, feature_pyramid_network, misc, poolers
from serve.compat.torchvision.ops.boxes import (
    batched_nms,
    box_area,
    box_convert,
    box_iou,
    clip_boxes_to_image,
    generalized_box_iou,
    nms,
    remove_small_boxes,
)
from serve.compat.torchvision.ops.feature_pyramid_network import FeaturePyramidNetwork
from serve.compat.torchvision.ops.misc import (
    MLP,
    Conv2dNormActivation,
    FrozenBatchNorm2d,
    Permute,
    SqueezeExcitation,
    StochasticDepth,
    stochastic_depth,
)
from serve.compat.torchvision.ops.poolers import MultiScaleRoIAlign
from serve.compat.torchvision.ops.roi_align import RoIAlign, RoIPool, roi_align, roi_pool

__all__ = [
    "MLP",
    "Conv2dNormActivation",
    "FeaturePyramidNetwork",
    "FrozenBatchNorm2d",
    "MultiScaleRoIAlign",
    "Permute",
    "RoIAlign",
    "RoIPool",
    "SqueezeExcitation",
    "StochasticDepth",
    "batched_nms",
    "box_area",
    "box_convert",
    "box_iou",
    "boxes",
    "clip_boxes_to_image",
    "feature_pyramid_network",
    "generalized_box_iou",
    "misc",
    "nms",
    "poolers",
    "remove_small_boxes",
    "roi_align",
    "roi_pool",
    "stochastic_depth",
]
