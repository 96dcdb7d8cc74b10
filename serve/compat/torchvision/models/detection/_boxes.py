"""What the detection models share: ImageList (a padded batch and its images' sizes) and BoxCoder (box deltas
to boxes, Fast R-CNN's parametrisation), on numpy arrays.

Detection post-processing (decoding, top-k, NMS) runs on the numpy arrays behind the tensors: it picks and
reorders boxes, which is control flow, not tensor maths; convolutions stay on serve tensors.
"""

from __future__ import annotations

import math

import numpy as np

import serve


class ImageList:
    """A batch tensor (N, C, H, W), padded, and the (height, width) of each image in it before padding."""

    def __init__(self, tensors: serve.Tensor, image_sizes: list[tuple[int, int]]) -> None:
        self.tensors = tensors
        self.image_sizes = image_sizes


class BoxCoder:
    """Deltas (dx, dy, dw, dh), divided by `weights`, applied to reference boxes: centre shifted by dx * width,
    size scaled by exp(dw) (dw clamped at log(1000 / 16))."""

    def __init__(self, weights: tuple[float, float, float, float], bbox_xform_clip: float = math.log(1000.0 / 16)
                 ) -> None:  # fmt: skip
        self.weights = weights
        self.bbox_xform_clip = bbox_xform_clip

    def decode(self, rel_codes: np.ndarray, boxes: np.ndarray) -> np.ndarray:
        """rel_codes (R, 4K), boxes (R, 4) -> (R, K, 4) boxes."""
        boxes = boxes.astype(rel_codes.dtype, copy=False)
        widths, heights = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
        ctr_x, ctr_y = boxes[:, 0] + 0.5 * widths, boxes[:, 1] + 0.5 * heights
        wx, wy, ww, wh = (rel_codes.dtype.type(w) for w in self.weights)
        dx, dy = rel_codes[:, 0::4] / wx, rel_codes[:, 1::4] / wy
        clip = rel_codes.dtype.type(self.bbox_xform_clip)
        dw, dh = np.minimum(rel_codes[:, 2::4] / ww, clip), np.minimum(rel_codes[:, 3::4] / wh, clip)
        pred_ctr_x, pred_ctr_y = dx * widths[:, None] + ctr_x[:, None], dy * heights[:, None] + ctr_y[:, None]
        half_w, half_h = 0.5 * np.exp(dw) * widths[:, None], 0.5 * np.exp(dh) * heights[:, None]
        out = np.stack([pred_ctr_x - half_w, pred_ctr_y - half_h, pred_ctr_x + half_w, pred_ctr_y + half_h], axis=2)
        return out.astype(rel_codes.dtype, copy=False)  # (R, K, 4)
