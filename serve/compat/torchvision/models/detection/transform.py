"""`torchvision.models.detection.transform.GeneralizedRCNNTransform`: normalise, resize, batch; and map the
detected boxes back to the original images.

Resizing scales an image by min(min_size / shorter side, max_size / longer side) with bilinear interpolation
(`recompute_scale_factor=True`, so the size is floor(side * scale)); the batch is zero-padded at the bottom and
right to multiples of `size_divisible`. Boxes are scaled back by original / resized size per axis. Masks (Mask
R-CNN's, (K, 1, M, M) per box) are pasted into the original image as torchvision's paste_masks_in_image does: the
mask zero-padded by one pixel and its box widened by (M + 2) / M about its centre, truncated to integers, the mask
resized bilinearly to the box's (h + 1, w + 1) and copied into a zero (H, W) map where it overlaps the image.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

import serve
import serve.nn.functional as F
from serve import nn
from serve.compat.torchvision.models.detection._boxes import ImageList


class GeneralizedRCNNTransform(nn.Module):
    def __init__(self, min_size: int | Sequence[int], max_size: int, image_mean: Sequence[float],
                 image_std: Sequence[float], size_divisible: int = 32, fixed_size: tuple[int, int] | None = None,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__()
        self.min_size = (min_size,) if isinstance(min_size, int) else tuple(min_size)
        self.max_size = max_size
        self.image_mean, self.image_std = list(image_mean), list(image_std)
        self.size_divisible, self.fixed_size = size_divisible, fixed_size
        self._skip_resize = kwargs.pop("_skip_resize", False)

    def normalize(self, image: serve.Tensor) -> serve.Tensor:
        if not image.is_floating_point():
            raise TypeError(f"Expected input images to be of floating type (in range [0, 1]), but found {image.dtype}")
        mean = serve.tensor(self.image_mean, dtype=image.dtype, device=image.device).reshape(-1, 1, 1)
        std = serve.tensor(self.image_std, dtype=image.dtype, device=image.device).reshape(-1, 1, 1)
        return (image - mean) / std

    def resize(self, image: serve.Tensor) -> serve.Tensor:
        if self._skip_resize:
            return image
        h, w = image.shape[-2:]
        if self.fixed_size is not None:
            return F.interpolate(image[None], size=(self.fixed_size[1], self.fixed_size[0]), mode="bilinear",
                                 align_corners=False)[0]  # fmt: skip
        # Python floats (double), as torchvision computes it outside scripting: 96 * float32(160 / 96) would floor
        # to 159 where torchvision gets 160
        scale = min(self.min_size[-1] / min(int(h), int(w)), self.max_size / max(int(h), int(w)))
        return F.interpolate(image[None], scale_factor=float(scale), mode="bilinear", recompute_scale_factor=True,
                             align_corners=False)[0]  # fmt: skip

    def batch_images(self, images: list[serve.Tensor]) -> serve.Tensor:
        stride = float(self.size_divisible)
        channels = max(int(i.shape[0]) for i in images)
        height = int(math.ceil(max(int(i.shape[1]) for i in images) / stride) * stride)
        width = int(math.ceil(max(int(i.shape[2]) for i in images) / stride) * stride)
        padded = [F.pad(i, (0, width - int(i.shape[2]), 0, height - int(i.shape[1]), 0, channels - int(i.shape[0])))
                  for i in images]  # fmt: skip
        return serve.stack(padded)  # (N, C, H, W)

    def forward(self, images: list[serve.Tensor], targets: Any = None) -> tuple[ImageList, Any]:
        if targets is not None:
            raise NotImplementedError("serve's detection models run inference only: call them without targets")
        resized = []
        for image in images:
            if image.dim() != 3:
                raise ValueError(
                    f"images is expected to be a list of 3d tensors of shape [C, H, W], got {tuple(image.shape)}"
                )
            resized.append(self.resize(self.normalize(image)))
        sizes = [(int(i.shape[-2]), int(i.shape[-1])) for i in resized]
        return ImageList(self.batch_images(resized), sizes), None

    def postprocess(self, result: list[dict[str, Any]], image_shapes: list[tuple[int, int]],
                    original_image_sizes: list[tuple[int, int]]) -> list[dict[str, Any]]:  # fmt: skip
        for pred, (h, w), (oh, ow) in zip(result, image_shapes, original_image_sizes):
            boxes = pred["boxes"]
            ratio_h, ratio_w = np.float32(oh) / np.float32(h), np.float32(ow) / np.float32(w)
            pred["boxes"] = boxes * np.asarray([ratio_w, ratio_h, ratio_w, ratio_h], dtype=boxes.dtype)
            if "masks" in pred:
                pred["masks"] = paste_masks_in_image(pred["masks"], pred["boxes"], (oh, ow))
        return result


def paste_masks_in_image(masks: np.ndarray, boxes: np.ndarray, image_hw: tuple[int, int],
                         padding: int = 1) -> np.ndarray:  # fmt: skip
    """(K, 1, M, M) mask probabilities at their (K, 4) boxes -> (K, 1, H, W) maps of the image (module docstring)."""
    height, width = image_hw
    out = np.zeros((len(masks), 1, height, width), dtype=np.float32)
    if not len(masks):
        return out
    size = masks.shape[-1]
    padded = np.pad(masks[:, 0], ((0, 0), (padding, padding), (padding, padding)))  # (K, M + 2, M + 2)
    scale = np.float32((size + 2 * padding) / size)
    half = (boxes[:, 2:] - boxes[:, :2]) * np.float32(0.5) * scale  # (K, 2): half width, half height
    centre = (boxes[:, 2:] + boxes[:, :2]) * np.float32(0.5)
    wide = np.concatenate([centre - half, centre + half], axis=1).astype(np.int64)  # truncated, as torch's .to()
    for k, (x0, y0, x1, y1) in enumerate(wide.tolist()):
        w, h = max(x1 - x0 + 1, 1), max(y1 - y0 + 1, 1)
        resized = F.interpolate(serve.from_numpy(np.ascontiguousarray(padded[k][None, None])), size=(h, w),
                                mode="bilinear", align_corners=False)[0, 0].numpy()  # fmt: skip  # (h, w)
        top, left, bottom, right = max(y0, 0), max(x0, 0), min(y1 + 1, height), min(x1 + 1, width)
        if bottom > top and right > left:
            out[k, 0, top:bottom, left:right] = resized[top - y0 : bottom - y0, left - x0 : right - x0]
    return out
