"""`VisionHandler`: TorchServe's base of the image handlers: request bytes -> decoded image -> transforms -> batch.

Each request's payload (`data` or `body`) is
- a str: base64 of the image bytes (whitespace and a `data:image/...;base64,` prefix are allowed),
- bytes: a JPEG, PNG or WebP image, decoded by Pillow and run through `image_processing`,
- a nested list of numbers (parsed JSON): taken as an already-preprocessed (C, H, W) float tensor,
and the batch is stacked into one (N, C, H, W) `serve.Tensor`.

`image_processing` is built from the model-config's `handler:` section over the class's `transform_defaults`:
    handler:
      resize: 256          # int = shorter side (aspect kept), [h, w] = exact; null = no resize
      crop: 224            # CenterCrop, int or [h, w]; null = no crop
      image_size: 32       # shorthand for resize and crop both (explicit resize/crop win)
      mean: [0.485, 0.456, 0.406]   # Normalize; null (with std) = no Normalize
      std: [0.229, 0.224, 0.225]
      grayscale: false     # true: images become 1-channel "L", else 3-channel RGB
A subclass that sets `image_processing` itself (as TorchServe handlers do) keeps it and these keys are unused.
When the transforms fix the image size (a crop, or an exact [h, w] resize), `example_inputs(b)` is a (b, C, H, W)
float32 batch of that size, for the worker's warm-up of the optimized model (none for a subclass's own
`image_processing`).

Explanations (`/explanations/{model}`): integrated gradients of each request's `target` class with respect to its
preprocessed image, one (C, H, W) nested list per request, TorchServe's JSON (handlers/insights.py);
model-config `handler: {ig_steps: 15, ig_batch_size: 16}`.

Per-request errors (the other requests of the batch carry on): bad base64, bytes that are not a JPEG/PNG/WebP
or are truncated, a nested list that is ragged or not numeric, or not one image (C, H, W) with no empty side and
the transforms' channels (3, 1 with grayscale): 400. An image whose header claims more pixels than
`limit_max_image_pixels` allows: 413, refused from the header, before any pixel is decoded (True = Pillow's
default limit, 89,478,485 pixels; False = no limit; an int = that many pixels).
Sizes: preprocess returns one batch tensor when every input of the batch has one shape (TorchServe's flow), else
a group per shape, each run through the model on its own (handlers/shape_groups.py): a nested list skips the
transforms, so its size may differ from the images', and it is answered when the model takes it, or is a 400
naming the sizes the model answers (the transforms' size counts) when the model fails on it, never a failure of
the images beside it. A batch of one shape the model fails on fails as a whole, as before.

Where we differ from TorchServe, on purpose:
- Images are converted to RGB (or "L" with grayscale) before the transforms: TorchServe hands a PNG's alpha
  channel or a palette's indices to the model, which then fails on 4 or 1 channels.
- Only JPEG, PNG and WebP are decoded (`image_formats`), not every format Pillow knows: a smaller attack surface.
- Bad input answers that request with a 4xx instead of failing the whole batch with a 500; the pixel limit
  is exact (TorchServe's Pillow check only warns up to twice the limit).
- With `limit_max_image_pixels` False or above Pillow's limit, Pillow's own global check is switched off
  for the process, as TorchServe does for False; this handler's check still enforces the configured limit.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
from PIL import Image, UnidentifiedImageError

import serve
from handlers.base_handler import BaseHandler
from handlers.insights import explain_rows, ig_settings, image_insights
from handlers.shape_groups import AnsweredShapes, Group, ShapeGroups, group_indices
from handlers.transforms import IMAGENET_MEAN, IMAGENET_STD, build_image_processing
from serve.errors import InvalidInput, PredictionException
from serve.worker.context import Context

# Pillow's own default (PIL.Image.MAX_IMAGE_PIXELS), fixed here because that global may be switched off.
PILLOW_MAX_IMAGE_PIXELS = 1024 * 1024 * 1024 // 4 // 3
TRANSFORM_KEYS = ("resize", "crop", "mean", "std", "grayscale")
# transform_defaults of the built-in handlers: TorchServe's image_classifier pipeline, and ToTensor alone
IMAGENET_TRANSFORMS = {"resize": 256, "crop": 224, "mean": IMAGENET_MEAN, "std": IMAGENET_STD}
TO_TENSOR_ONLY = {"resize": None, "crop": None, "mean": None, "std": None}


def pixel_limit(setting: Any) -> int | None:
    """`limit_max_image_pixels` as a pixel count: True = Pillow's default, False = None (no limit), int = it."""
    if setting is True:
        return PILLOW_MAX_IMAGE_PIXELS
    if setting is False or setting is None:
        return None
    if isinstance(setting, int) and setting > 0:
        return setting
    raise ValueError(f"limit_max_image_pixels must be true, false or a positive pixel count, got {setting!r}")


def decode_base64(text: str) -> bytes:
    """Base64 text (a data URL's payload too) to bytes; strict, so a typo is an error, not garbage bytes."""
    if text.startswith("data:") and "," in text:
        text = text.split(",", 1)[1]
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError) as e:
        raise InvalidInput(f"the input string is not valid base64 ({e}): send raw image bytes or base64") from e


def decode_image(raw: bytes, max_pixels: int | None, formats: Sequence[str]) -> Image.Image:
    """Pillow image from bytes; the pixel limit is checked on the header's size before decoding any pixel."""
    try:
        image = Image.open(io.BytesIO(raw), formats=list(formats))
    except Image.DecompressionBombError as e:
        raise PredictionException(f"image refused: {e}", 413) from e
    except UnidentifiedImageError as e:
        accepted = ", ".join(formats)
        raise InvalidInput(f"could not decode the image ({len(raw)} bytes): not one of the formats {accepted}") from e
    except (OSError, SyntaxError, ValueError) as e:
        raise InvalidInput(f"could not decode the image: {e}") from e
    width, height = image.size
    if max_pixels is not None and width * height > max_pixels:
        raise PredictionException(
            f"image of {width}x{height} = {width * height} pixels is over the limit of {max_pixels} pixels "
            "(limit_max_image_pixels): send a smaller image",
            413,
        )
    try:
        image.load()
    except (OSError, SyntaxError, ValueError, EOFError) as e:
        raise InvalidInput(f"could not decode the {image.format} image ({width}x{height}): {e}") from e
    return image


def nested_list_tensor(value: Any) -> np.ndarray:
    """A parsed-JSON nested list of numbers as a float32 array (TorchServe's FloatTensor path)."""
    if isinstance(value, bool) or not isinstance(value, list):
        raise InvalidInput(
            f"expected image bytes, a base64 string or a nested list of numbers, got {type(value).__name__}"
        )
    try:
        return np.asarray(value, dtype=np.float32)
    except (ValueError, TypeError) as e:
        raise InvalidInput(f"the nested list is not a rectangular array of numbers: {e}") from e


def transformed_shape(settings: dict[str, Any]) -> tuple[int, int, int] | None:
    """(C, H, W) of every image after these transforms: the crop's size, else an exact [h, w] resize; None when
    the size follows the image's."""
    crop, resize = settings.get("crop"), settings.get("resize")
    size = crop if crop is not None else resize if isinstance(resize, (list, tuple)) else None
    if isinstance(size, int) and not isinstance(size, bool):
        height = width = size
    elif isinstance(size, (list, tuple)) and len(size) == 2:
        height, width = int(size[0]), int(size[1])
    else:
        return None
    return (1 if settings.get("grayscale") else 3, height, width)


class VisionHandler(BaseHandler):
    """Decodes images (or takes nested lists), applies `image_processing`, stacks the batch."""

    image_processing: Callable[[Image.Image], np.ndarray] | None = None
    image_formats: tuple[str, ...] = ("JPEG", "PNG", "WEBP")
    # TorchServe's base VisionHandler leaves the transforms to subclasses: here ToTensor only
    transform_defaults: ClassVar[dict[str, Any]] = TO_TENSOR_ONLY
    kserve_envelopes = True  # KServe v1 {"data": ...} / v2 inputs arrive as the payload (batching/envelopes.py)
    ig_steps = 15  # integrated-gradients steps of an explanation (TorchServe's VisionHandler: n_steps=15)

    def __init__(self) -> None:
        super().__init__()
        self.max_image_pixels: int | None = PILLOW_MAX_IMAGE_PIXELS
        self.input_shape: tuple[int, int, int] | None = None  # (C, H, W) the transforms make, when fixed
        self.channels: int | None = None  # C the transforms make, when built from the model-config

    def initialize(self, context: Context) -> None:
        super().initialize(context)
        self.max_image_pixels = pixel_limit(context.system_properties.get("limit_max_image_pixels", True))
        if self.max_image_pixels is None or self.max_image_pixels > (Image.MAX_IMAGE_PIXELS or 0):
            Image.MAX_IMAGE_PIXELS = None  # Pillow would refuse what we allow; our own check enforces the limit
        if self.image_processing is None:
            self.image_processing = self.build_image_processing(self.handler_config)
        if self.input_shape is not None:  # what every image becomes, and the warm-up's shape: one the model answers
            self.answered_shapes = AnsweredShapes([(self.input_shape, "float32")])
        ig_settings(self, self.ig_steps)  # a bad handler.ig_steps / ig_batch_size fails the load, not a request

    def build_image_processing(self, config: dict[str, Any]) -> Callable[[Image.Image], np.ndarray]:
        """The transforms from the `handler:` settings over `transform_defaults` (keys in the module docstring)."""
        settings = {"grayscale": False, **self.transform_defaults}
        if "image_size" in config:
            settings["resize"] = settings["crop"] = config["image_size"]
        settings.update({key: config[key] for key in TRANSFORM_KEYS if key in config})
        if not isinstance(settings["grayscale"], bool):
            raise ValueError(f"model-config handler.grayscale must be true or false, got {settings['grayscale']!r}")
        try:
            processing = build_image_processing(**settings)
        except (ValueError, TypeError) as e:
            raise ValueError(f"model-config handler: section: {e}") from e
        self.input_shape = transformed_shape(settings)
        self.channels = 1 if settings["grayscale"] else 3
        return processing

    def example_inputs(self, batch_size: int) -> tuple[Any, ...] | None:
        """(batch, C, H, W) float32 images when the transforms fix the size (a crop, or an exact resize)."""
        if self.input_shape is None:
            return None
        return (self.example_tensor((batch_size, *self.input_shape)),)

    def preprocess(self, data: list[Any]) -> Any:
        """The images stacked (N, C, H, W) on the device; ShapeGroups when their shapes differ."""
        good, values = self.decode_rows(data, self.decode_input)
        groups = group_indices(value.shape for value in values)
        if len(groups) <= 1:
            return serve.from_numpy(np.stack(values)).to(self.device) if values else None
        return ShapeGroups(
            Group((shape, "float32"), [good[i] for i in members],
                  serve.from_numpy(np.stack([values[i] for i in members])).to(self.device))
            for shape, members in groups.items()
        )  # fmt: skip

    def decode_input(self, payload: Any) -> np.ndarray:
        """One request's payload -> its (C, H, W) float array."""
        if isinstance(payload, str):
            payload = decode_base64(payload)
        if isinstance(payload, (bytes, bytearray)):
            if self.image_processing is None:
                raise RuntimeError(f"{type(self).__name__}.initialize(context) must run before images are decoded")
            image = decode_image(bytes(payload), self.max_image_pixels, self.image_formats)
            return np.asarray(self.image_processing(image), dtype=np.float32)
        return self.check_tensor(nested_list_tensor(payload))

    def check_tensor(self, value: np.ndarray) -> np.ndarray:
        """A nested-list input as one image (see the module docstring), else InvalidInput."""
        shape = list(value.shape)
        if value.ndim != 3 or 0 in value.shape:
            raise InvalidInput(f"a nested list input is one preprocessed image (C, H, W) with no empty side, got shape "
                               f"{shape}: send an image, or a nested list of that form")  # fmt: skip
        if self.channels is not None and value.shape[0] != self.channels:
            raise InvalidInput(f"input of shape {shape} has {value.shape[0]} channels; this model's images have "
                               f"{self.channels} (C, H, W): send an image, or a nested list of that form")  # fmt: skip
        return value

    # ---- explanations (handlers/insights.py) ---------------------------------------------------------------

    def explain_handle(self, data_preprocess: Any, raw_data: list[Any]) -> Any:
        """Integrated gradients of each request's `target` class (0 by default), one (C, H, W) list per image."""
        return explain_rows(self, data_preprocess, raw_data)

    def get_insights(self, tensor_data: Any, _: Any, target: Any = 0) -> list[Any]:
        """TorchServe's VisionHandler.get_insights: IntegratedGradients(model) over the batch, as nested lists."""
        return image_insights(self, tensor_data, target)
