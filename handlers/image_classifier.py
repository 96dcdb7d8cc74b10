"""`image_classifier`: TorchServe's built-in image classification handler.

Transforms (TorchServe's, overridable in the model-config `handler:` section, see vision_handler.py): Resize 256,
CenterCrop 224, ToTensor, ImageNet Normalize. The model returns logits (N, classes); each image's answer is the
softmax's top `topk` (default 5, `handler: topk: 3` to change) as `{label: probability}`, most likely first,
where label is `index_to_name.json`'s entry for the class index (its last element when the entry is a list,
as in `{"0": ["n01440764", "tench"]}`), or the index as a string when there is no mapping.

Where we differ from TorchServe, on purpose: a topk larger than the number of classes returns every class
(TorchServe fails the batch), and a class index missing from the mapping is answered with the index string
(TorchServe fails the batch with a KeyError).
"""

from __future__ import annotations

from typing import Any, ClassVar

import serve
import serve.nn.functional as F
from handlers.base_handler import map_class_to_label
from handlers.vision_handler import IMAGENET_TRANSFORMS, VisionHandler
from serve.worker.context import Context


class ImageClassifier(VisionHandler):
    """Top-k class probabilities per image."""

    topk = 5
    transform_defaults: ClassVar[dict[str, Any]] = IMAGENET_TRANSFORMS

    def initialize(self, context: Context) -> None:
        super().initialize(context)
        topk = self.handler_config.get("topk", self.topk)
        if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
            raise ValueError(f"model-config handler.topk must be a positive integer, got {topk!r}")
        self.set_max_result_classes(topk)

    def set_max_result_classes(self, topk: int) -> None:
        self.topk = topk

    def get_max_result_classes(self) -> int:
        return self.topk

    def postprocess(self, data: Any) -> list[dict[str, Any]]:
        if not isinstance(data, serve.Tensor) or data.ndim != 2:
            shape = list(data.shape) if isinstance(data, serve.Tensor) else type(data).__name__
            raise RuntimeError(f"image_classifier expects the model to return logits (batch, classes), got {shape}")
        probs = F.softmax(data.float(), dim=1)
        top_probs, top_classes = serve.topk(probs, min(self.topk, probs.shape[1]), dim=1)
        return map_class_to_label(top_probs.tolist(), self.mapping, top_classes.tolist())
