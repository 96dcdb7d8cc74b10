"""`object_detector`: TorchServe's built-in object detection handler.

Transforms: ToTensor only (configurable in the model-config `handler:` section, see vision_handler.py). The
model is called with a LIST of (C, H, W) tensors, one per image, and returns one dict per image with `boxes`
(n, 4) as [x1, y1, x2, y2], `labels` (n,) and `scores` (n,): torchvision's detection-model interface. Each
image's answer keeps the detections scoring at least `threshold` (0.5; `handler: threshold: 0.3` to change),
in the model's order, each as `{label: [x1, y1, x2, y2], "score": s}` with label from `index_to_name.json`
(its last element when the entry is a list; the legacy `{"object_type_names": [...]}` works too) or the label
index as a string.

Where we differ from TorchServe: TorchServe stacks the images into one tensor, so a batch of images of
different sizes fails; a list lets each image keep its size, and models that iterate over their input take
either. A label missing from the mapping is answered with its index string instead of failing the batch.
"""

from __future__ import annotations

from typing import Any, ClassVar

import serve
from handlers.base_handler import map_class_to_label
from handlers.vision_handler import TO_TENSOR_ONLY, VisionHandler
from serve.worker.context import Context


def _as_list(value: Any) -> list[Any]:
    return value.tolist() if hasattr(value, "tolist") else list(value)


class ObjectDetector(VisionHandler):
    """Boxes, labels and scores above a threshold, per image."""

    threshold = 0.5
    transform_defaults: ClassVar[dict[str, Any]] = TO_TENSOR_ONLY

    def initialize(self, context: Context) -> None:
        super().initialize(context)
        threshold = self.handler_config.get("threshold", self.threshold)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise ValueError(f"model-config handler.threshold must be a number, got {threshold!r}")
        self.threshold = float(threshold)

    def example_inputs(self, batch_size: int) -> tuple[Any, ...] | None:
        """None: the model takes a list of images of their own sizes, which no warm-up can stand for."""
        return None

    def preprocess(self, data: list[Any]) -> list[serve.Tensor]:
        _, values = self.decode_rows(data, self.decode_input)
        return [serve.from_numpy(v).to(self.device) for v in values]  # each (C, H, W)

    def postprocess(self, data: Any) -> list[list[dict[str, Any]]]:
        if not isinstance(data, (list, tuple)) or not all(isinstance(d, dict) for d in data):
            raise RuntimeError(
                "object_detector expects the model to return a list with one dict of boxes, labels and scores "
                f"per image, got {type(data).__name__}"
            )
        return [self.detections(row) for row in data]

    def detections(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        missing = [key for key in ("boxes", "labels", "scores") if key not in row]
        if missing:
            raise RuntimeError(f"object_detector: the model's output for an image has no {', '.join(missing)}")
        boxes, labels, scores = (_as_list(row[key]) for key in ("boxes", "labels", "scores"))
        result = []
        for box, label, score in zip(boxes, labels, scores):
            if score >= self.threshold:
                detection = map_class_to_label([[box]], self.mapping, [[int(label)]])[0]  # {label: box}
                detection["score"] = score
                result.append(detection)
        return result
