"""`ts.torch_handler.image_classifier.ImageClassifier`: TorchServe's image classifier on serve's.

`topk` (5; `set_max_result_classes(k)` or model-config `handler: {topk: k}`), `image_processing` (a subclass
sets its own Compose, as TorchServe's MNIST example does; by default Resize 256, CenterCrop 224, ToTensor,
ImageNet Normalize), postprocess = softmax, top k, `map_class_to_label`: one `{label: probability}` per image,
most likely first, TorchServe's JSON.
"""

from __future__ import annotations

from handlers import image_classifier as serve_classifier
from serve.compat.ts.torch_handler.vision_handler import VisionHandler


class ImageClassifier(VisionHandler, serve_classifier.ImageClassifier):
    """TorchServe's ImageClassifier: the top k classes of each image with their probabilities."""
