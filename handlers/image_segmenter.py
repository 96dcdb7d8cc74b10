"""`image_segmenter`: TorchServe's built-in semantic segmentation handler.

Transforms as image_classifier (Resize 256, CenterCrop 224, ToTensor, ImageNet Normalize; configurable in the
model-config `handler:` section, see vision_handler.py). The model returns class scores (N, classes, H, W),
or a dict holding them under "out" as torchvision's segmentation models do. Each image's answer is an H x W
nested list of `[class_index, probability]` pairs: the most likely class of each pixel (as a float, TorchServe's
shape) and its softmax probability. TorchServe returns only the top class because the full per-class map of a
224 x 224 image is tens of megabytes of JSON.

Where we differ from TorchServe: a plain tensor output is accepted as well as the dict, and an output of the
wrong shape fails with a message saying what was expected.
"""

from __future__ import annotations

from typing import Any, ClassVar

import serve
import serve.nn.functional as F
from handlers.vision_handler import IMAGENET_TRANSFORMS, VisionHandler


class ImageSegmenter(VisionHandler):
    """Per pixel, the most likely class and its probability."""

    transform_defaults: ClassVar[dict[str, Any]] = IMAGENET_TRANSFORMS

    def postprocess(self, data: Any) -> list[Any]:
        scores = data["out"] if isinstance(data, dict) and "out" in data else data
        if not isinstance(scores, serve.Tensor) or scores.ndim != 4:
            got = list(scores.shape) if isinstance(scores, serve.Tensor) else type(scores).__name__
            raise RuntimeError(
                f"image_segmenter expects the model to return scores (batch, classes, H, W) or a dict with them "
                f"under 'out', got {got}"
            )
        probs = F.softmax(scores.float(), dim=1)
        best = serve.max(probs, dim=1)  # values and indices, each (N, H, W)
        pairs = serve.stack([best.indices.to(best.values.dtype), best.values], dim=3)  # (N, H, W, 2)
        return pairs.tolist()
