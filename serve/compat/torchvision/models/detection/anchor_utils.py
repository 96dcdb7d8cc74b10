"""`torchvision.models.detection.anchor_utils.AnchorGenerator`: per feature level, `len(sizes) *
len(aspect_ratios)` anchors centred on every cell's top-left corner (cell = image size // feature size).

A base anchor of size s and aspect ratio r (height / width) is (-w/2, -h/2, w/2, h/2) with h = s * sqrt(r),
w = s / sqrt(r), rounded to integers, as torchvision's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import serve
from serve import nn
from serve.compat.torchvision.models.detection._boxes import ImageList


class AnchorGenerator(nn.Module):
    def __init__(self, sizes: Sequence[Sequence[int]] = ((128, 256, 512),),
                 aspect_ratios: Sequence[Sequence[float]] = ((0.5, 1.0, 2.0),)) -> None:  # fmt: skip
        super().__init__()
        if not isinstance(sizes[0], list | tuple):
            sizes = tuple((s,) for s in sizes)  # type: ignore[misc]
        if not isinstance(aspect_ratios[0], list | tuple):
            aspect_ratios = (aspect_ratios,) * len(sizes)  # type: ignore[assignment]
        self.sizes, self.aspect_ratios = sizes, aspect_ratios
        self.cell_anchors = [self.generate_anchors(s, a) for s, a in zip(sizes, aspect_ratios)]

    @staticmethod
    def generate_anchors(scales: Sequence[int], aspect_ratios: Sequence[float]) -> np.ndarray:
        scales_a = np.asarray(scales, dtype=np.float32)
        h_ratios = np.sqrt(np.asarray(aspect_ratios, dtype=np.float32))
        w_ratios = np.float32(1) / h_ratios
        ws = (w_ratios[:, None] * scales_a[None, :]).reshape(-1)
        hs = (h_ratios[:, None] * scales_a[None, :]).reshape(-1)
        return np.round(np.stack([-ws, -hs, ws, hs], axis=1) / np.float32(2))  # (A, 4)

    def num_anchors_per_location(self) -> list[int]:
        return [len(s) * len(a) for s, a in zip(self.sizes, self.aspect_ratios)]

    def forward(self, image_list: ImageList, feature_maps: list[serve.Tensor]) -> list[np.ndarray]:
        """One (sum over levels of H * W * A, 4) array of anchors per image."""
        if len(feature_maps) != len(self.cell_anchors):
            raise ValueError(f"AnchorGenerator has sizes for {len(self.cell_anchors)} feature maps but got "
                             f"{len(feature_maps)}: give one sizes/aspect_ratios entry per level")  # fmt: skip
        image_h, image_w = image_list.tensors.shape[-2:]
        levels = []
        for fmap, base in zip(feature_maps, self.cell_anchors):
            gh, gw = fmap.shape[-2:]
            stride_h, stride_w = image_h // gh, image_w // gw
            shift_y, shift_x = np.meshgrid(np.arange(gh) * stride_h, np.arange(gw) * stride_w, indexing="ij")
            shifts = np.stack([shift_x, shift_y, shift_x, shift_y], axis=-1).reshape(-1, 1, 4).astype(np.float32)
            levels.append((shifts + base[None]).reshape(-1, 4))  # (H * W * A, 4), cell-major as torchvision
        anchors = np.concatenate(levels)
        return [anchors for _ in image_list.image_sizes]
