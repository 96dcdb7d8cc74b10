"""`ts.torch_handler.vision_handler.VisionHandler`: TorchServe's base of the image handlers, on serve's.

preprocess: each request's bytes (or base64 text) are opened with Pillow and run through `self.image_processing`
(a subclass's torchvision-style Compose, or serve's configurable default, see handlers/vision_handler.py); a
nested list is taken as an already-made tensor; the batch is stacked into one (N, C, H, W) tensor on the device.
Bad input answers that request with a 4xx and the batch carries on (TorchServe fails the batch).
`self.ig` is TorchServe's Captum `IntegratedGradients(self.model)`, serve's (handlers/explanations.py), so a
subclass's `get_insights` calling `self.ig.attribute(tensor, target=target, n_steps=15)` runs unchanged.
"""

from __future__ import annotations

from handlers import vision_handler as serve_vision
from handlers.explanations import IntegratedGradients
from serve.compat.ts.torch_handler.base_handler import BaseHandler
from serve.worker.context import Context


class VisionHandler(BaseHandler, serve_vision.VisionHandler):
    """TorchServe's VisionHandler: images in, a stacked batch to the model."""

    def initialize(self, context: Context) -> None:
        super().initialize(context)
        self.ig = IntegratedGradients(self.model)  # TorchServe's attribute (Captum there, serve's here)
