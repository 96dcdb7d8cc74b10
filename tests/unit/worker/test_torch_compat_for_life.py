"""In a worker process of a torch-compat archive, torch / torchvision / ts are serve's for the process's whole life
(issue 26 item 1): a module imported lazily in `initialize` (importlib.import_module, as TorchServe's vgg_16
handler does) and an `import torch` at request time get serve's, probes behave like a torch install without
torchaudio (find_spec), and torch.__version__ is a version transformers accepts. A real worker process
(`python -P -m serve.worker.process`) speaking its protocol; the real torch is never imported in it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from serve.batching.job import InferenceRequest
from serve.worker.protocol import encode_batch, read_message_sync, write_message_sync

WORKER_S = 120  # a worker starts in seconds; bound for a machine at a load of 10

HANDLER = """
import importlib
import torch  # the detection: this archive is torch-compat


class Lazy:
    def initialize(self, context):
        self.model = importlib.import_module("lazy_model")  # imported after the handler file, in initialize

    def handle(self, data, context):
        import importlib.util
        import sys

        import torch.nn.functional as F  # an import at request time
        import torchvision.transforms  # noqa: F401

        spec = importlib.util.find_spec("torch")
        return [{
            "initialize_torch": self.model.torch_module,
            "request_torch": F.__file__,
            "spec_name": spec.name, "has_spec": torch.__spec__ is not None,
            "version": torch.__version__,
            "torchaudio_spec": importlib.util.find_spec("torchaudio") is None,
            "real_torch_loaded": any(getattr(m, "__file__", None) and "site-packages/torch/" in m.__file__
                                     for m in list(sys.modules.values())),
            "relu": self.model.relu_sum(),
        } for _ in data]
"""

LAZY_MODEL = """
import torch
import torch.nn as nn

torch_module = torch.zeros(1).__class__.__module__


def relu_sum():
    return float(nn.ReLU()(torch.tensor([-1.0, 2.0, 3.0])).sum())
"""


def _model_dir(root: Path) -> Path:
    path = root / "lazy-1.0"
    (path / "MAR-INF").mkdir(parents=True)
    (path / "handler.py").write_text(HANDLER)
    (path / "lazy_model.py").write_text(LAZY_MODEL)
    manifest = {"runtime": "python", "model": {"modelName": "lazy", "handler": "handler.py", "modelVersion": "1.0"}}
    (path / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    return path


def test_a_worker_resolves_torch_to_serve_in_initialize_and_at_request_time(tmp_path):
    log = tmp_path / "worker.log"  # a file, not a pipe: the log can never block the worker on a full pipe
    with log.open("wb") as stderr:
        worker = subprocess.Popen(
            [sys.executable, "-P", "-m", "serve.worker.process", "--model-dir", str(_model_dir(tmp_path))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd=str(tmp_path),
        )  # fmt: skip
    try:
        assert worker.stdin is not None and worker.stdout is not None
        ready = read_message_sync(worker.stdout, 1 << 20)
        assert ready is not None and ready[0]["type"] == "ready", (ready, log.read_text()[-3000:])
        write_message_sync(worker.stdin, *encode_batch(1, "predict", [InferenceRequest("r", {"body": b"x"})]))
        worker.stdin.flush()
        result = read_message_sync(worker.stdout, 1 << 20)
        assert result is not None and result[0]["type"] == "result", result
        answer = json.loads(result[1][result[0]["responses"][0]["body"]])
    finally:
        if worker.stdin is not None:
            worker.stdin.close()
        try:
            worker.wait(WORKER_S)
        finally:
            if worker.poll() is None:
                worker.kill()
    assert answer["initialize_torch"].startswith("serve.")
    assert "/serve/" in answer["request_torch"], answer["request_torch"]
    assert answer["spec_name"] == "torch" and answer["has_spec"]
    assert answer["version"] == "2.13.0"
    assert answer["torchaudio_spec"] is True
    assert answer["real_torch_loaded"] is False
    assert answer["relu"] == 5.0
