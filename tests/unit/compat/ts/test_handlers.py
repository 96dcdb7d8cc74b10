"""ts.torch_handler on serve: TorchServe handlers load an archive directory the TorchServe way and answer as
PyTorch does on the same input (within 1e-5); what serve cannot run fails at initialize, with the feature named.

Each model file is written with `import torch` as TorchServe's examples are, its state_dict saved by torch; the
handlers are loaded by serve's handler loader with torch compatibility on.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import serve
from serve import nn
from serve.compat.ts.torch_handler.base_handler import BaseHandler
from serve.compat.ts.torch_handler.image_classifier import ImageClassifier
from serve.worker.context import Context
from serve.worker.handler_loader import load_handler
from tests.helpers import needs_torch, torch

MLP = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))
"""

CUSTOM = """
import json

import torch
import torch.nn.functional as F
from serve import nn
from serve.compat.ts.torch_handler.base_handler import BaseHandler


class JsonHandler(BaseHandler):
    # TorchServe's custom-handler shape: rows read by hand, tensors made with torch, own postprocess
    def preprocess(self, data):
        rows = [json.loads(row.get("data") or row.get("body")) for row in data]
        return torch.tensor(rows, dtype=torch.float32)

    def postprocess(self, data):
        return F.softmax(data, dim=1).argmax(dim=1).tolist()
"""


def make_model_dir(tmp_path: Path, files: dict[str, str], manifest_model: dict, state_dict=None) -> Path:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    if state_dict is not None:
        torch.save(state_dict, tmp_path / "model.pt")
    return tmp_path


def context_for(model_dir: Path, model: dict, config: dict | None = None, batch: int = 4) -> Context:
    manifest = {"model": {"modelName": "m", "modelVersion": "1.0", **model}}
    return Context("m", str(model_dir), manifest, batch, None, "0.1", model_yaml_config=config or {})


def torch_mlp():
    torch.manual_seed(0)
    net = torch.nn.Sequential()
    net.fc1, net.fc2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 3)
    return net, lambda x: net.fc2(torch.relu(net.fc1(x)))


def batch(context: Context, rows: list) -> list:
    context.begin_batch({i: f"r{i}" for i in range(len(rows))}, [{} for _ in rows])
    return rows


@needs_torch
def test_base_handler_loads_the_eager_model_and_answers_as_torch(tmp_path):
    net, forward = torch_mlp()
    model = {"modelFile": "model.py", "serializedFile": "model.pt", "handler": "base_handler"}
    root = make_model_dir(tmp_path, {"model.py": MLP}, model, net.state_dict())
    context = context_for(root, model)
    handler = BaseHandler()
    handler.initialize(context)
    assert handler.initialized and handler.map_location == "cpu" and str(handler.device) == "cpu"
    assert handler.model_pt_path == str(root / "model.pt") and handler.mapping is None
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    out = handler.handle(batch(context, [{"body": json.dumps(r.tolist()).encode()} for r in x]), context)
    with torch.no_grad():
        ref = forward(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(np.asarray(out), ref, atol=1e-5, rtol=0)
    assert [r.name for r in context.metrics.records()] == ["HandlerTime"]


@needs_torch
def test_a_torchserve_custom_handler_file_runs_unchanged(tmp_path):
    net, forward = torch_mlp()
    model = {"modelFile": "model.py", "serializedFile": "model.pt", "handler": "handler.py"}
    root = make_model_dir(tmp_path, {"model.py": MLP, "handler.py": CUSTOM}, model, net.state_dict())
    context = context_for(root, model, {"torchCompat": True, "handler": {"profile": True}})
    handler = load_handler(context)
    x = np.random.default_rng(2).standard_normal((4, 4)).astype(np.float32)
    out = handler.handle(batch(context, [{"data": json.dumps(r.tolist())} for r in x]), context)
    with torch.no_grad():
        assert out == forward(torch.from_numpy(x)).argmax(dim=1).tolist()
    names = [r.name for r in context.metrics.records()]
    assert names == ["ts_handler_inference", "HandlerTime"]  # the overrides are not @timed, as in TorchServe


class NoSuperInit(ImageClassifier):
    """As TorchServe's micro-batching example: __init__ without super().__init__()."""

    def __init__(self):
        self.marker = "mine"


def png(values: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(values).save(buf, format="PNG")
    return buf.getvalue()


LENET = """
import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.fc = nn.Linear(2 * 6 * 6, 10)

    def forward(self, x):
        return self.fc(torch.flatten(torch.relu(self.conv(x)), 1))
"""


@needs_torch
def test_image_classifier_subclass_with_its_own_transforms_answers_torchs_top_k(tmp_path):
    from handlers.transforms import Compose, Normalize, ToTensor

    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(72, 10))
    state = {"conv.weight": ref[0].weight, "conv.bias": ref[0].bias, "fc.weight": ref[3].weight, "fc.bias": ref[3].bias}
    model = {"modelFile": "model.py", "serializedFile": "model.pt", "handler": "h.py"}
    root = make_model_dir(tmp_path, {"model.py": LENET}, model, state)
    (root / "index_to_name.json").write_text(json.dumps({str(i): ["id", f"digit{i}"] for i in range(10)}))
    handler = NoSuperInit()
    handler.image_processing = Compose([ToTensor(), Normalize((0.1307,), (0.3081,))])
    context = context_for(root, model)
    handler.initialize(context)
    assert handler.marker == "mine" and handler.topk == 5 and handler.mapping["3"] == "digit3"
    handler.set_max_result_classes(3)
    images = np.random.default_rng(3).integers(0, 256, (2, 8, 8), dtype=np.uint8)
    out = handler.handle(batch(context, [{"body": png(img)} for img in images]), context)
    x = (torch.from_numpy(images.astype(np.float32) / 255)[:, None] - 0.1307) / 0.3081
    with torch.no_grad():
        probs, classes = torch.softmax(ref(x), dim=1).topk(3, dim=1)
    for got, p, c in zip(out, probs.tolist(), classes.tolist()):
        assert list(got) == [f"digit{k}" for k in c]
        np.testing.assert_allclose(list(got.values()), p, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("serialized", "config", "message"),
    [
        ("traced.pt", {}, r"traced.pt: a TorchScript model .* does not run TorchScript programs: archive the eager"),
        ("model.onnx", {}, r"ONNX models \(and TensorRT through ONNX Runtime\) cannot run on serve"),
        ("model.so", {}, r"torch.export AOT-compiled library cannot run on serve"),
        ("model.pt", {"pt2": {"export": {"aot_compile": True}}}, r"model-config pt2 export \(torch.export AOT"),
    ],
)
def test_what_serve_cannot_run_fails_at_initialize_naming_the_feature(tmp_path, serialized, config, message):
    (tmp_path / serialized).write_bytes(b"not used")
    context = context_for(tmp_path, {"serializedFile": serialized}, config)
    with pytest.raises(RuntimeError, match=message):
        BaseHandler().initialize(context)


@needs_torch
@pytest.mark.parametrize(
    ("pt2", "warned"),
    [({"compile": {"enable": False, "backend": "inductor"}}, False), ({"compile": {"enable": True}}, True),
     ("inductor", True)],
)  # fmt: skip
def test_pt2_compile_is_warned_and_the_eager_model_loads(tmp_path, caplog, pt2, warned):
    """TorchServe's vgg_16 example ships pt2: {compile: {enable: True}}: the model loads, with a warning."""
    net, _ = torch_mlp()
    model = {"modelFile": "model.py", "serializedFile": "model.pt"}
    make_model_dir(tmp_path, {"model.py": MLP}, model, net.state_dict())
    handler = BaseHandler()
    with caplog.at_level(logging.WARNING):
        handler.initialize(context_for(tmp_path, model, {"pt2": pt2}))
    assert handler.initialized and isinstance(handler.model, nn.Module)
    assert ("pt2 compile (torch.compile) is ignored" in caplog.text) == warned


def test_ipex_switch_fails_at_initialize(tmp_path, monkeypatch):
    monkeypatch.setenv("TS_IPEX_ENABLE", "true")
    with pytest.raises(RuntimeError, match="Intel Extension for PyTorch"):
        BaseHandler().initialize(context_for(tmp_path, {"serializedFile": "x.pt"}))


def test_model_file_with_two_modules_is_refused_as_torchserve_does(tmp_path):
    two = MLP + "\n\nclass Other(nn.Module):\n    pass\n"
    model = {"modelFile": "model.py"}
    make_model_dir(tmp_path, {"model.py": two}, model)
    with pytest.raises(ValueError, match=r"Expected only one class as model definition.*\(Net, Other\)"):
        BaseHandler().initialize(context_for(tmp_path, model))
    assert isinstance(serve.nn.Module, type)
