"""`torchvision.ops.roi_align` / `RoIAlign` (Mask R-CNN, He et al., 2017) and `roi_pool` / `RoIPool` (Fast R-CNN).

roi_align: each output bin of a box averages `sampling_ratio` x `sampling_ratio` bilinear samples of the feature
map (adaptive: `ceil(box size / output size)` per axis when sampling_ratio <= 0); samples more than one pixel
outside the map are 0, others are clamped to it; `aligned=True` shifts boxes by half a pixel (pixel centres at
+0.5) and lets boxes be smaller than a pixel. Bilinear sampling is separable, so each box is two small matrices:
rows (out_h, H) and columns (out_w, W), the output `rows @ feature @ columns.T`.

roi_pool: each bin is the max over the integer cells it covers (box corners rounded half away from zero), 0 for
an empty bin.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import serve
from serve import nn
from serve.compat.torchvision.ops._arrays import array, tensor

__all__ = ["RoIAlign", "RoIPool", "roi_align", "roi_pool"]


def _pair(size: Any) -> tuple[int, int]:
    return (int(size), int(size)) if isinstance(size, int) else (int(size[0]), int(size[1]))


def rois_array(boxes: Any, name: str) -> np.ndarray:
    """(K, 5) rows of (batch index, x1, y1, x2, y2) from a (K, 5) tensor or a list of (L, 4) tensors, one per image."""
    if isinstance(boxes, list | tuple):
        parts = [array(b, name, "boxes") for b in boxes]
        for b in parts:
            if b.ndim != 2 or b.shape[1] != 4:
                raise ValueError(f"{name}: each image's boxes should be of shape (L, 4), got {tuple(b.shape)}")
        if not parts:
            return np.zeros((0, 5), dtype=np.float32)
        dtype = np.result_type(*parts)
        return np.concatenate([np.concatenate([np.full((len(b), 1), i, dtype), b.astype(dtype)], axis=1)
                               for i, b in enumerate(parts)])  # fmt: skip
    rois = array(boxes, name, "boxes")
    if rois.ndim != 2 or rois.shape[1] != 5:
        raise ValueError(f"{name}: boxes should be a (K, 5) tensor of (batch index, x1, y1, x2, y2) or a list of "
                         f"(L, 4) tensors, got shape {tuple(rois.shape)}")  # fmt: skip
    return rois


def _features(input: Any, name: str) -> np.ndarray:
    x = array(input, name, "input")
    if x.ndim != 4:
        raise ValueError(f"{name}: input should be a (N, C, H, W) feature map, got shape {tuple(x.shape)}")
    return x


def _sample_matrix(start: float, size: float, bins: int, grid: int, n: int) -> np.ndarray:
    """(bins, n): the mean over `grid` samples per bin of the bilinear weights on an axis of length n."""
    weights = np.zeros((bins, n))
    if grid <= 0:
        return weights
    step = size / bins
    pos = start + np.arange(bins)[:, None] * step + (np.arange(grid)[None, :] + 0.5) * step / grid  # (bins, grid)
    valid = (pos >= -1.0) & (pos <= n)
    pos = np.maximum(pos, 0.0)
    low = np.floor(pos).astype(np.int64)
    at_end = low >= n - 1
    low = np.where(at_end, n - 1, low)
    high = np.where(at_end, n - 1, low + 1)
    frac = np.where(at_end, 0.0, pos - low)
    rows = np.broadcast_to(np.arange(bins)[:, None], pos.shape)
    np.add.at(weights, (rows, low), np.where(valid, 1.0 - frac, 0.0) / grid)
    np.add.at(weights, (rows, high), np.where(valid, frac, 0.0) / grid)
    return weights


def _support(weights: np.ndarray) -> slice:
    """The columns holding a nonzero weight, as one slice (empty when there are none)."""
    used = np.flatnonzero(weights.any(axis=0))
    return slice(int(used[0]), int(used[-1]) + 1) if used.size else slice(0, 0)


def roi_align(input: serve.Tensor, boxes: Any, output_size: Any, spatial_scale: float = 1.0,
              sampling_ratio: int = -1, aligned: bool = False) -> serve.Tensor:  # fmt: skip
    """(K, C, out_h, out_w): each box of `boxes` (image coordinates, times spatial_scale) pooled from `input`."""
    x = _features(input, "roi_align")
    rois = rois_array(boxes, "roi_align")
    out_h, out_w = _pair(output_size)
    height, width = x.shape[-2:]
    out = np.zeros((len(rois), x.shape[1], out_h, out_w), dtype=x.dtype)
    offset = 0.5 if aligned else 0.0
    for k, (b, x1, y1, x2, y2) in enumerate(rois.astype(np.float64)):
        x1, y1, x2, y2 = x1 * spatial_scale - offset, y1 * spatial_scale - offset, x2 * spatial_scale - offset, \
            y2 * spatial_scale - offset  # fmt: skip
        roi_w, roi_h = x2 - x1, y2 - y1
        if not aligned:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_h / out_h)
        grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_w / out_w)
        rows = _sample_matrix(y1, roi_h, out_h, grid_h, height).astype(x.dtype)  # (out_h, H)
        cols = _sample_matrix(x1, roi_w, out_w, grid_w, width).astype(x.dtype)  # (out_w, W)
        ys, xs = _support(rows), _support(cols)  # only the pixels the box samples: its window of the map
        window = x[int(b), :, ys, xs]  # (C, h, w)
        out[k] = rows[:, ys] @ window @ cols[:, xs].T  # (out_h, h) @ (C, h, w) @ (w, out_w) -> (C, out_h, out_w)
    return tensor(out, input)


def _round_half_away(v: float) -> int:
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def roi_pool(input: serve.Tensor, boxes: Any, output_size: Any, spatial_scale: float = 1.0) -> serve.Tensor:
    """(K, C, out_h, out_w): the max of each bin of each box (Fast R-CNN's RoI max pooling)."""
    x = _features(input, "roi_pool")
    rois = rois_array(boxes, "roi_pool")
    out_h, out_w = _pair(output_size)
    height, width = x.shape[-2:]
    out = np.zeros((len(rois), x.shape[1], out_h, out_w), dtype=x.dtype)
    for k, roi in enumerate(rois.astype(np.float64)):
        b = int(roi[0])
        x1, y1, x2, y2 = (_round_half_away(v * spatial_scale) for v in roi[1:])
        bin_h, bin_w = max(y2 - y1 + 1, 1) / out_h, max(x2 - x1 + 1, 1) / out_w
        for ph in range(out_h):
            h0 = min(max(math.floor(ph * bin_h) + y1, 0), height)
            h1 = min(max(math.ceil((ph + 1) * bin_h) + y1, 0), height)
            for pw in range(out_w):
                w0 = min(max(math.floor(pw * bin_w) + x1, 0), width)
                w1 = min(max(math.ceil((pw + 1) * bin_w) + x1, 0), width)
                if h1 > h0 and w1 > w0:
                    out[k, :, ph, pw] = x[b, :, h0:h1, w0:w1].max(axis=(1, 2))
    return tensor(out, input)


class RoIAlign(nn.Module):
    def __init__(self, output_size: Any, spatial_scale: float, sampling_ratio: int, aligned: bool = False) -> None:
        super().__init__()
        self.output_size, self.spatial_scale = output_size, spatial_scale
        self.sampling_ratio, self.aligned = sampling_ratio, aligned

    def forward(self, input: serve.Tensor, rois: Any) -> serve.Tensor:
        return roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.aligned)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
                f"sampling_ratio={self.sampling_ratio}, aligned={self.aligned}")  # fmt: skip


class RoIPool(nn.Module):
    def __init__(self, output_size: Any, spatial_scale: float) -> None:
        super().__init__()
        self.output_size, self.spatial_scale = output_size, spatial_scale

    def forward(self, input: serve.Tensor, rois: Any) -> serve.Tensor:
        return roi_pool(input, rois, self.output_size, self.spatial_scale)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}, spatial_scale={self.spatial_scale}"
