"""ts ImageSegmenter and ObjectDetector answer TorchServe's JSON shapes, the numbers computed as TorchServe's
postprocess computes them with torch on the torch model's output (within 1e-5)."""

from __future__ import annotations

import io
import json

import numpy as np
from PIL import Image

from serve.compat.ts.torch_handler.image_segmenter import ImageSegmenter, ImangeSegmenter
from serve.compat.ts.torch_handler.object_detector import ObjectDetector
from serve.worker.context import Context
from tests.helpers import needs_torch, torch

SEGMENTER = """
from torch import nn


class Seg(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return {"out": self.head(x)}
"""

DETECTOR = """
import torch
from torch import nn


class Det(nn.Module):
    # three fixed anchors per image, scored and labelled from the image's mean colour
    def __init__(self):
        super().__init__()
        self.score = nn.Linear(3, 3)
        self.label = nn.Linear(3, 3)

    def forward(self, images):
        out = []
        for img in images:
            colour = img.mean(dim=(1, 2))
            boxes = torch.tensor([[0.0, 0.0, 4.0, 4.0], [1.0, 2.0, 5.0, 7.0], [2.0, 2.0, 3.0, 3.0]])
            labels = self.label(colour).abs().long() % 2 + 1
            out.append({"boxes": boxes * colour.sum(), "labels": labels, "scores": torch.sigmoid(self.score(colour))})
        return out
"""


def setup(tmp_path, source, cls, seed, mapping=None):
    (tmp_path / "model.py").write_text(source)
    torch.manual_seed(seed)
    ns: dict = {}
    exec(source, ns)
    ref = ns[cls]().eval()
    torch.save(ref.state_dict(), tmp_path / "model.pt")
    if mapping is not None:
        (tmp_path / "index_to_name.json").write_text(json.dumps(mapping))
    manifest = {"model": {"modelName": "v", "modelFile": "model.py", "serializedFile": "model.pt"}}
    return ref, Context("v", str(tmp_path), manifest, 2, None, "0.1")


def rows(context, payloads):
    context.begin_batch({i: f"r{i}" for i in range(len(payloads))}, [{} for _ in payloads])
    return [{"body": p} for p in payloads]


@needs_torch
def test_segmenter_answers_top_class_and_probability_per_pixel(tmp_path):
    ref, context = setup(tmp_path, SEGMENTER, "Seg", 0)
    handler = ImangeSegmenter()
    assert isinstance(handler, ImageSegmenter)
    handler.initialize(context)
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 6)).astype(np.float32)
    out = handler.handle(rows(context, [img.tolist() for img in x]), context)
    with torch.no_grad():  # TorchServe's postprocess on torch's output
        best = torch.max(torch.softmax(ref(torch.from_numpy(x))["out"], dim=1), dim=1)
        expected = torch.stack([best.indices.type(best.values.dtype), best.values], dim=3).numpy()
    got = np.asarray(out)
    assert got.shape == (2, 5, 6, 2)
    np.testing.assert_array_equal(got[..., 0], expected[..., 0])
    np.testing.assert_allclose(got[..., 1], expected[..., 1], atol=1e-5, rtol=0)


def png(rng) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (9, 7, 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


@needs_torch
def test_detector_answers_label_box_and_score_above_the_threshold(tmp_path):
    ref, context = setup(tmp_path, DETECTOR, "Det", 3, {"object_type_names": ["__background__", "person", "car"]})
    handler = ObjectDetector()
    handler.initialize(context)
    rng = np.random.default_rng(1)
    images = [png(rng), png(rng)]
    out = handler.handle(rows(context, images), context)
    for raw, got in zip(images, out):
        tensor = torch.from_numpy(np.asarray(Image.open(io.BytesIO(raw)), dtype=np.float32) / 255).permute(2, 0, 1)
        with torch.no_grad():
            pred = ref([tensor])[0]
        keep = pred["scores"] >= 0.5
        names = {1: "person", 2: "car"}
        kept = (pred[key][keep].tolist() for key in ("labels", "boxes", "scores"))
        expected = [{names[int(label)]: box, "score": score} for label, box, score in zip(*kept)]
        assert [list(d) for d in got] == [list(d) for d in expected] and expected
        for g, e in zip(got, expected):
            label = next(iter(e))
            np.testing.assert_allclose(g[label], e[label], atol=1e-5, rtol=0)
            assert abs(g["score"] - e["score"]) < 1e-5
