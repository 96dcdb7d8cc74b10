"""`ts.torch_handler.vision_handler.VisionHandler`: TorchServe's base of the image handlers, on serve's.

preprocess: each request's bytes (or base64 text) are opened with Pillow and run through `self.image_processing`
(a subclass's torchvision-style Compose, or serve's configurable default, see handlers/vision_handler.py); a
nested list is taken as an already-made tensor; the batch is stacked into one (N, C, H, W) tensor on the device.
Bad input answers that request with a 4xx and the batch carries on (TorchServe fails the batch).
"""

from __future__ import annotations

from handlers import vision_handler as serve_vision
from serve.compat.ts.torch_handler.base_handler import BaseHandler


class VisionHandler(BaseHandler, serve_vision.VisionHandler):
    """TorchServe's VisionHandler: images in, a stacked batch to the model."""
