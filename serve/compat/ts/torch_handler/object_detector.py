"""`ts.torch_handler.object_detector.ObjectDetector`: TorchServe's detection handler on serve's.

The model takes the images (ToTensor only) and returns one dict of `boxes`, `labels`, `scores` per image; each
image's answer is the list of detections scoring at least `threshold` (0.5), each `{label: [x1, y1, x2, y2],
"score": s}`, TorchServe's JSON.
"""

from __future__ import annotations

from handlers import object_detector as serve_detector
from serve.compat.ts.torch_handler.vision_handler import VisionHandler


class ObjectDetector(VisionHandler, serve_detector.ObjectDetector):
    """TorchServe's ObjectDetector: boxes, labels and scores above the threshold, per image."""
