"""`torchvision.models.detection.transform.GeneralizedRCNNTransform`: normalise, resize, batch; and map the
detected boxes back to the original images.

Resizing scales an image by min(min_size / shorter side, max_size / longer side) with bilinear interpolation
(`recompute_scale_factor=True`, so the size is floor(side * scale)); the batch is zero-padded at the bottom and
right to multiples of `size_divisible`. Boxes are scaled back by original / resized size per axis.
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
        return result
