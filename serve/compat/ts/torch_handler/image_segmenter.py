"""`ts.torch_handler.image_segmenter.ImageSegmenter`: TorchServe's segmentation handler on serve's.

The model's `out` scores (N, K, H, W) become, per image, an H x W list of `[class, probability]` (the most likely
class as a float and its softmax probability), TorchServe's JSON. `ImangeSegmenter` is TorchServe's old
misspelled name, kept as it keeps it.
"""

from __future__ import annotations

from handlers import image_segmenter as serve_segmenter
from serve.compat.ts.torch_handler.vision_handler import VisionHandler


class ImageSegmenter(VisionHandler, serve_segmenter.ImageSegmenter):
    """TorchServe's ImageSegmenter: per pixel, the top class and its probability."""


class ImangeSegmenter(ImageSegmenter):
    """TorchServe's original, misspelled name."""
