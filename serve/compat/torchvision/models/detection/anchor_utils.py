"""`torchvision.models.detection.anchor_utils.AnchorGenerator`: per feature level, `len(sizes) *
len(aspect_ratios)` anchors centred on every cell's top-left corner (cell = image size // feature size).

A base anchor of size s and aspect ratio r (height / width) is (-w/2, -h/2, w/2, h/2) with h = s * sqrt(r),
w = s / sqrt(r), rounded to integers, as torchvision's.
"""

from __future__ import annotations

import math
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


class DefaultBoxGenerator(nn.Module):
    """SSD's default boxes (Liu et al., 2016): per level k, at every cell centre ((i + 0.5) / f_k), boxes of scale
    s_k and sqrt(s_k * s_k+1) (square) and s_k with each aspect ratio and its inverse; scales spaced linearly
    from min_ratio to max_ratio (then 1.0), sizes clipped to [0, 1] and scaled to the padded batch's size."""

    def __init__(self, aspect_ratios: list[list[int]], min_ratio: float = 0.15, max_ratio: float = 0.9,
                 scales: list[float] | None = None, steps: list[int] | None = None, clip: bool = True
                 ) -> None:  # fmt: skip
        super().__init__()
        if steps is not None and len(aspect_ratios) != len(steps):
            raise ValueError("aspect_ratios and steps should have the same length")
        self.aspect_ratios, self.steps, self.clip = aspect_ratios, steps, clip
        n = len(aspect_ratios)
        if scales is not None:
            self.scales = list(scales)
        elif n > 1:
            self.scales = [min_ratio + (max_ratio - min_ratio) * k / (n - 1.0) for k in range(n)] + [1.0]
        else:
            self.scales = [min_ratio, max_ratio]
        self._wh_pairs = [self._wh(k) for k in range(n)]

    def _wh(self, k: int) -> np.ndarray:
        s_k, s_next = self.scales[k], math.sqrt(self.scales[k] * self.scales[k + 1])
        pairs = [[s_k, s_k], [s_next, s_next]]
        for ar in self.aspect_ratios[k]:
            w, h = s_k * math.sqrt(ar), s_k / math.sqrt(ar)
            pairs += [[w, h], [h, w]]
        return np.asarray(pairs, dtype=np.float32)  # (2 + 2 * ratios, 2)

    def num_anchors_per_location(self) -> list[int]:
        return [2 + 2 * len(r) for r in self.aspect_ratios]

    def forward(self, image_list: ImageList, feature_maps: list[serve.Tensor]) -> list[np.ndarray]:
        image_h, image_w = (int(s) for s in image_list.tensors.shape[-2:])
        levels = []
        for k, fmap in enumerate(feature_maps):
            fh, fw = (int(s) for s in fmap.shape[-2:])
            y_f, x_f = (image_h / self.steps[k], image_w / self.steps[k]) if self.steps else (fh, fw)
            shift_y, shift_x = np.meshgrid(((np.arange(fh) + 0.5) / y_f).astype(np.float32),
                                           ((np.arange(fw) + 0.5) / x_f).astype(np.float32), indexing="ij")  # fmt: skip
            wh = np.clip(self._wh_pairs[k], 0, 1) if self.clip else self._wh_pairs[k]
            centres = np.repeat(np.stack([shift_x.reshape(-1), shift_y.reshape(-1)], axis=1), len(wh), axis=0)
            sizes = np.tile(wh, (fh * fw, 1))
            levels.append(np.concatenate([centres, sizes], axis=1))  # (cx, cy, w, h), cell-major
        boxes = np.concatenate(levels)
        scale = np.asarray([image_w, image_h], dtype=np.float32)
        centre, half = boxes[:, :2], 0.5 * boxes[:, 2:]
        corners = np.concatenate([(centre - half) * scale, (centre + half) * scale], axis=1)  # (x1, y1, x2, y2)
        return [corners.astype(np.float32) for _ in image_list.image_sizes]
