"""A TorchServe-style handler that loads a Hugging Face model with `from_pretrained` in `initialize`, served by a real
worker process of a torch-compat archive (issue 26 items 1 and 2 together): transformers is imported by the handler
file, its modeling files inside `from_pretrained`, all on serve's alias; the logits match torch's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from serve.batching.job import InferenceRequest
from serve.worker.protocol import encode_batch, read_message_sync, write_message_sync
from tests.transformers_reference import needs_transformers, reference_transformers

pytestmark = needs_transformers
WORKER_S = 300  # the worker imports transformers and loads the model: seconds; bounded for a machine at a load of 10

HANDLER = """
import json

import torch
import transformers


class HuggingFaceHandler:
    def initialize(self, context):
        model_dir = context.system_properties["model_dir"]
        self.model = transformers.AutoModelForSequenceClassification.from_pretrained(model_dir).eval()

    def handle(self, data, context):
        ids = torch.tensor([json.loads(row["body"]) for row in data])
        with torch.no_grad():
            logits = self.model(input_ids=ids).logits
        return [{"logits": row, "torch": torch.__file__} for row in logits.tolist()]
"""


def test_a_worker_serves_a_from_pretrained_model_like_torch(tmp_path):
    import torch

    transformers = reference_transformers()
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                     vocab_size=99, num_labels=3)  # fmt: skip
    model = transformers.AutoModelForSequenceClassification.from_config(config).eval()
    model_dir = tmp_path / "bert-1.0"
    model.save_pretrained(model_dir)
    (model_dir / "handler.py").write_text(HANDLER)
    (model_dir / "MAR-INF").mkdir()
    manifest = {"runtime": "python", "model": {"modelName": "bert", "handler": "handler.py", "modelVersion": "1.0"}}
    (model_dir / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    ids = [[5, 17, 42, 8, 3], [9, 9, 61, 2, 77]]
    with torch.no_grad():
        expected = model(input_ids=torch.tensor(ids)).logits.numpy()

    answers = _serve(model_dir, [json.dumps(row).encode() for row in ids])
    assert all("/serve/" in a["torch"] for a in answers), answers[0]["torch"]
    got = np.array([a["logits"] for a in answers], np.float32)
    assert float(np.abs(got - expected).max()) <= 1e-5 * float(np.abs(expected).max())


def _serve(model_dir: Path, bodies: list[bytes]) -> list[dict]:
    """One batch through `python -P -m serve.worker.process`; the answers, decoded."""
    log = model_dir.parent / "worker.log"  # a file, not a pipe: a chatty load can never block on a full pipe
    with log.open("wb") as stderr:
        worker = subprocess.Popen(
            [sys.executable, "-P", "-m", "serve.worker.process", "--model-dir", str(model_dir), "--batch-size", "2"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd=str(model_dir),
        )  # fmt: skip
    assert worker.stdin is not None and worker.stdout is not None
    try:
        ready = read_message_sync(worker.stdout, 1 << 20)
        assert ready is not None and ready[0]["type"] == "ready", (ready, log.read_text()[-3000:])
        requests = [InferenceRequest(f"r{i}", {"body": b}) for i, b in enumerate(bodies)]
        write_message_sync(worker.stdin, *encode_batch(1, "predict", requests))
        worker.stdin.flush()
        result = read_message_sync(worker.stdout, 1 << 24)
        assert result is not None and result[0]["type"] == "result", result
        return [json.loads(result[1][r["body"]]) for r in result[0]["responses"]]
    finally:
        worker.stdin.close()
        try:
            worker.wait(WORKER_S)
        finally:
            if worker.poll() is None:
                worker.kill()
            worker.stdout.close()
