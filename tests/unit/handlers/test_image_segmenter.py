"""image_segmenter: per-pixel [class, probability] against torch's softmax + max on the same scores."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import serve
from handlers.image_segmenter import ImageSegmenter
from handlers.transforms import build_image_processing
from serve import nn
from tests.helpers import needs_torch, torch
from tests.unit.handlers.vision_helpers import assert_row_error, png_bytes, run_batch, vision_handler

CLASSES = 4


class ToySegmenter(nn.Module):
    """A 1x1 conv: class scores (N, classes, H, W), optionally under "out" as torchvision's models return them."""

    def __init__(self, as_dict: bool) -> None:
        super().__init__()
        self.head = nn.Conv2d(3, CLASSES, 1)
        self.as_dict = as_dict

    def forward(self, x: serve.Tensor):
        scores = self.head(x)  # (N, classes, H, W)
        return {"out": scores, "aux": scores * 0} if self.as_dict else scores


def scores_of(handler, raws: list[bytes]) -> np.ndarray:
    batch = np.stack([build_image_processing(12, (6, 5))(Image.open(io.BytesIO(r))) for r in raws])
    with serve.no_grad():
        out = handler.model(serve.from_numpy(batch))
    return (out["out"] if isinstance(out, dict) else out).numpy()


@needs_torch
@pytest.mark.parametrize("as_dict", [True, False])
def test_each_pixel_gets_its_top_class_and_probability_as_torch(tmp_path, as_dict):
    config = {"resize": 12, "crop": [6, 5]}
    handler, context = vision_handler(ImageSegmenter, ToySegmenter(as_dict), tmp_path, config)
    raws = [png_bytes(16, 14, seed=s) for s in range(2)]
    results = run_batch(handler, context, [{"body": r} for r in raws])
    probs = torch.softmax(torch.from_numpy(scores_of(handler, raws)), dim=1)
    best = torch.max(probs, dim=1)
    ref = torch.stack([best.indices.type(best.values.dtype), best.values], dim=3).tolist()  # TorchServe's code
    for result, expected in zip(results, ref):
        assert np.asarray(result).shape == (6, 5, 2)  # H x W x [class, probability]
        np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-7)
        assert all(isinstance(c, float) and c.is_integer() for row in result for c, _ in row)


def test_defaults_and_per_request_errors(tmp_path):
    handler, context = vision_handler(ImageSegmenter, ToySegmenter(True), tmp_path, {"image_size": 8})
    assert "Resize(size=8" in repr(handler.image_processing) and "Normalize" in repr(handler.image_processing)
    results = run_batch(handler, context, [{"body": b"not an image"}, {"body": png_bytes(9, 9)}])
    assert_row_error(results[0], context, 0, 400, "could not decode the image")
    assert np.asarray(results[1]).shape == (8, 8, 2)
    probs = np.asarray(results[1])[..., 1]
    assert ((probs >= 1 / CLASSES - 1e-6) & (probs <= 1)).all()


def test_a_model_output_of_the_wrong_shape_fails_the_batch(tmp_path):
    handler, context = vision_handler(ImageSegmenter, nn.Flatten(), tmp_path, {"image_size": 8})
    with pytest.raises(RuntimeError, match=r"\(batch, classes, H, W\).*got \[1, 192\]"):
        run_batch(handler, context, [{"body": png_bytes(8, 8)}])


def test_a_wrong_nested_list_first_fails_alone(tmp_path):
    handler, context = vision_handler(ImageSegmenter, ToySegmenter(False), tmp_path, {"image_size": 8})
    image = png_bytes(9, 9)
    results = run_batch(handler, context, [{"body": [[[1.0, 2.0, 3.0]]]}, {"body": image}, {"body": image}])
    assert_row_error(results[0], context, 0, 400, "has 1 channels; this model's images have 3")
    (alone,) = run_batch(handler, context, [{"body": image}])
    np.testing.assert_allclose(np.asarray(results[1:]), np.asarray([alone, alone]), rtol=1e-6)
