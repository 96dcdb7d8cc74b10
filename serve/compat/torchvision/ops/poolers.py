"""`torchvision.ops.MultiScaleRoIAlign`: RoIAlign over a feature pyramid (FPN, Lin et al., 2017), each box pooled
from the level that fits its size.

A level's scale is its size over the largest image size, rounded to a power of 2; a box of area A goes to level
`floor(canonical_level + log2(sqrt(A) / canonical_scale) + 1e-6)`, clamped to the levels present (224 pixels ->
level 4 by default), as torchvision's LevelMapper. Pooling uses roi_align with aligned=False, as torchvision's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import serve
from serve import nn
from serve.compat.torchvision.ops._arrays import array, tensor
from serve.compat.torchvision.ops.roi_align import roi_align, rois_array

__all__ = ["MultiScaleRoIAlign"]


def _infer_scale(feature_hw: tuple[int, int], original_hw: tuple[int, int]) -> float:
    scales = [2.0 ** float(np.round(np.log2(np.float32(f / o)))) for f, o in zip(feature_hw, original_hw)]
    if scales[0] != scales[1]:
        raise ValueError(f"MultiScaleRoIAlign: feature map {feature_hw} is not a power-of-2 scale of the image size "
                         f"{original_hw} on both axes (scales {scales})")  # fmt: skip
    return scales[0]


class MultiScaleRoIAlign(nn.Module):
    def __init__(self, featmap_names: list[str], output_size: Any, sampling_ratio: int, *,
                 canonical_scale: int = 224, canonical_level: int = 4) -> None:  # fmt: skip
        super().__init__()
        self.featmap_names = list(featmap_names)
        self.output_size = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
        self.sampling_ratio = sampling_ratio
        self.canonical_scale, self.canonical_level = canonical_scale, canonical_level

    def _levels(self, rois: np.ndarray, k_min: int, k_max: int) -> np.ndarray:
        sizes = np.sqrt((rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2]))
        target = np.floor(self.canonical_level + np.log2(sizes / self.canonical_scale) + 1e-6)
        return (np.clip(target, k_min, k_max) - k_min).astype(np.int64)

    def forward(self, x: dict[str, serve.Tensor], boxes: list[serve.Tensor], image_shapes: list[tuple[int, int]]
                ) -> serve.Tensor:  # fmt: skip
        features = [v for k, v in x.items() if k in self.featmap_names]
        if not features:
            raise ValueError(f"MultiScaleRoIAlign: none of the feature maps {self.featmap_names} is in the input "
                             f"(it has {list(x)})")  # fmt: skip
        original = (max(s[0] for s in image_shapes), max(s[1] for s in image_shapes))
        scales = [_infer_scale((int(f.shape[-2]), int(f.shape[-1])), original) for f in features]
        rois = rois_array(boxes, "MultiScaleRoIAlign")
        rois_t = serve.from_numpy(np.ascontiguousarray(rois))
        if len(features) == 1:
            return roi_align(features[0], rois_t, self.output_size, scales[0], self.sampling_ratio)
        k_min, k_max = round(-math.log2(scales[0])), round(-math.log2(scales[-1]))
        levels = self._levels(rois, k_min, k_max)
        first = array(features[0], "MultiScaleRoIAlign", "x")
        out = np.zeros((len(rois), first.shape[1], *self.output_size), dtype=first.dtype)
        for level, (feature, scale) in enumerate(zip(features, scales)):
            idx = np.flatnonzero(levels == level)
            if idx.size:
                level_rois = serve.from_numpy(np.ascontiguousarray(rois[idx]))
                out[idx] = roi_align(feature, level_rois, self.output_size, scale, self.sampling_ratio).numpy()
        return tensor(out, features[0])

    def extra_repr(self) -> str:
        return (f"featmap_names={self.featmap_names}, output_size={self.output_size}, "
                f"sampling_ratio={self.sampling_ratio}")  # fmt: skip
