"""The digits example end to end: archived by the model-archiver CLI, loaded by the handler loader (the unmodified
PyTorch model file through torch compatibility), every held-out digit sent as PNG bytes through `handle`.

The reference is training itself: heldout.npz holds PyTorch's prediction for each held-out digit and README.md
the accuracy they give. serve must reproduce them exactly: its float32 logits agree with PyTorch's to ~1e-5,
far below the margin between the top two classes of any held-out digit (checked below), so not one
prediction may flip.
"""

from __future__ import annotations

import importlib.util
import io
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import serve
from serve.archive import open_archive
from serve.cli.model_archiver import main as model_archiver
from serve.worker import load_from_archive
from tests.helpers import needs_torch, torch

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits"
BATCH = 8


def digit_png(values: np.ndarray) -> bytes:
    """As examples/digits/train.py: an 8x8 grayscale PNG, pixel round(v * 255 / 16)."""
    buf = io.BytesIO()
    Image.fromarray(np.round(values.astype(np.float64) * 255 / 16).astype(np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def heldout():
    return np.load(DIGITS / "heldout.npz")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    store = tmp_path_factory.mktemp("model_store")
    argv = ["--model-name", "digits", "--version", "1.0", "--handler", "image_classifier", "--torch-compat"]
    argv += ["--model-file", str(DIGITS / "model.py"), "--serialized-file", str(DIGITS / "digits_lenet.pt")]
    argv += ["--extra-files", str(DIGITS / "index_to_name.json"), "--config-file", str(DIGITS / "model-config.yaml")]
    assert model_archiver([*argv, "--export-path", str(store)]) == 0
    archive = open_archive(store / "digits.mar")
    handler, context = load_from_archive(archive, batch_size=BATCH)
    yield handler, context, archive
    archive.close()


def recorded_accuracy() -> tuple[int, int]:
    match = re.search(r"\*\*(\d+)/(\d+) = ", (DIGITS / "README.md").read_text())
    assert match, "examples/digits/README.md has no accuracy block: run examples/digits/train.py"
    return int(match.group(1)), int(match.group(2))


def test_the_archive_serves_the_pytorch_model_file_through_torch_compat(served):
    handler, _, archive = served
    assert archive.manifest["model"]["torchCompat"] is True
    assert "import torch" in (archive.model_dir / "model.py").read_text()
    assert isinstance(handler.model, serve.nn.Module) and type(handler.model).__name__ == "DigitsNet"


def test_held_out_accuracy_equals_trainings(served, heldout):
    handler, context, _ = served
    images, labels = heldout["images"], heldout["labels"]
    predictions = []
    for start in range(0, len(images), BATCH):
        rows = [{"body": digit_png(img)} for img in images[start : start + BATCH]]
        context.begin_batch({i: f"r{start + i}" for i in range(len(rows))}, [{} for _ in rows])
        for result in handler.handle(rows, context):
            assert list(result) == sorted(result, key=result.get, reverse=True) and len(result) == 3  # topk: 3
            predictions.append(int(next(iter(result))))  # labels "0".."9": the most likely first
    predictions = np.asarray(predictions)
    correct, total = recorded_accuracy()
    assert total == len(labels)
    np.testing.assert_array_equal(predictions, heldout["torch_predictions"])
    assert int((predictions == labels).sum()) == correct


@needs_torch
def test_logits_match_pytorch_on_the_same_tensors(served, heldout):
    handler, _, _ = served
    spec = importlib.util.spec_from_file_location("_digits_model_under_torch", DIGITS / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # real torch: the file as train.py used it
    reference = module.DigitsNet()
    reference.load_state_dict(torch.load(DIGITS / "digits_lenet.pt", weights_only=True))
    reference.eval()
    batch = handler.preprocess([{"body": digit_png(img)} for img in heldout["images"]])  # (360, 1, 32, 32)
    ours = handler.inference(batch).numpy()
    with torch.no_grad():
        ref = reference(torch.from_numpy(batch.numpy())).numpy()
    np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=0)
    top2 = np.sort(ref, axis=1)[:, -2:]
    assert (top2[:, 1] - top2[:, 0]).min() > 1e-3  # no near-tie a 1e-4 difference could flip
