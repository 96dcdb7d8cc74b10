"""BaseHandler end to end: a PyTorch-trained checkpoint in an archive answers as PyTorch does, through `handle`.

The model is trained and saved with torch; it is served from a twin file written with serve.nn, and from the
unmodified PyTorch file with torch compatibility on. Loading errors and per-request errors are checked too.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from handlers.base_handler import BaseHandler, load_label_mapping, map_class_to_label
from serve.errors import PredictionException
from serve.worker import Context, load_handler
from tests.helpers import needs_torch, torch

TORCH_FILE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.bn(self.fc1(x))))
"""
SERVE_FILE = TORCH_FILE.replace("import torch\n", "import serve as torch\n").replace("torch.nn", "serve.nn")


def model_dir(root: Path, files: dict[str, str | bytes], **model) -> Path:
    """An unpacked archive: the files and a MANIFEST.json with these `model` fields."""
    (root / "MAR-INF").mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (root / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    manifest = {"runtime": "python", "model": {"modelName": "net", "modelVersion": "1.0", **model}}
    (root / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    return root


def context_for(root: Path, **yaml) -> Context:
    manifest = json.loads((root / "MAR-INF" / "MANIFEST.json").read_text())
    return Context("net", str(root), manifest, 8, None, "0.1.0", model_yaml_config=yaml)


def train_torch_net(tmp_path: Path):
    """The PyTorch file's Net trained a few steps with SGD (so BatchNorm's running stats are real), in eval mode."""
    path = tmp_path / "torch_src" / "net.py"
    path.parent.mkdir()
    path.write_text(TORCH_FILE)
    spec = importlib.util.spec_from_file_location("h2_torch_net", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    net = module.Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    return net.eval()


@pytest.fixture
def trained(tmp_path):
    net = train_torch_net(tmp_path)
    ckpt = tmp_path / "net.pt"
    torch.save(net.state_dict(), ckpt)
    inputs = np.random.default_rng(1).standard_normal((5, 6)).astype(np.float32)
    with torch.no_grad():
        expected = net(torch.from_numpy(inputs)).numpy()
    return net, ckpt.read_bytes(), inputs, expected


def rows(inputs: np.ndarray) -> list[dict]:
    """TorchServe's input list: JSON bytes for some requests, already-parsed lists for others."""
    out = []
    for i, x in enumerate(inputs.tolist()):
        out.append({"body": json.dumps(x).encode()} if i % 2 else {"data": x})
    return out


@needs_torch
def test_serve_twin_file_gives_torchs_outputs(tmp_path, trained):
    _, ckpt, inputs, expected = trained
    root = model_dir(tmp_path / "m", {"model.py": SERVE_FILE, "net.pt": ckpt},
                     modelFile="model.py", serializedFile="net.pt", handler="base_handler")  # fmt: skip
    ctx = context_for(root)
    handler = load_handler(ctx)
    assert handler.initialized and not handler.model.training and handler.mapping is None
    out = handler.handle(rows(inputs), ctx)
    np.testing.assert_allclose(np.array(out), expected, rtol=1e-5, atol=1e-5)
    assert [r.name for r in ctx.metrics.records()] == ["HandlerTime"]


@needs_torch
@pytest.mark.parametrize("where", ["manifest", "model_config"])
def test_unmodified_pytorch_file_with_torch_compat(tmp_path, trained, where):
    _, ckpt, inputs, expected = trained
    compat = {"torchCompat": True} if where == "manifest" else {}
    root = model_dir(tmp_path / "m", {"model.py": TORCH_FILE, "net.pt": ckpt},
                     modelFile="model.py", serializedFile="net.pt", handler="base_handler", **compat)  # fmt: skip
    ctx = context_for(root, **({"torchCompat": True} if where == "model_config" else {}))
    out = load_handler(ctx).handle(rows(inputs), ctx)
    np.testing.assert_allclose(np.array(out), expected, rtol=1e-5, atol=1e-5)
    assert isinstance(torch.zeros(1), torch.Tensor)  # the real torch is back


@needs_torch
def test_archive_built_by_model_archiver_gives_torchs_outputs(tmp_path, trained):
    archive = pytest.importorskip("serve.archive")
    from serve.worker import load_from_archive

    net, _, inputs, expected = trained
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(TORCH_FILE)
    # a training checkpoint from a DataParallel model: find_state_dict picks the weights and strips "module."
    state = {f"module.{k}": v for k, v in net.state_dict().items()}
    torch.save({"epoch": 5, "model_state_dict": state, "optimizer_state_dict": {}}, src / "ckpt.pth")
    mar = archive.package("net", "1.0", "base_handler", model_file=src / "model.py",
                          serialized_file=src / "ckpt.pth", export_path=tmp_path, torch_compat=True)  # fmt: skip
    with archive.open_archive(mar) as opened:
        handler, ctx = load_from_archive(opened)
        out = handler.handle(rows(inputs), ctx)
    np.testing.assert_allclose(np.array(out), expected, rtol=1e-5, atol=1e-5)


@needs_torch
def test_strict_load_reports_every_mismatch_at_once(tmp_path, trained):
    _, ckpt, _, _ = trained
    wrong = SERVE_FILE.replace("self.fc2 = nn.Linear(16, 3)", "self.head = nn.Linear(16, 3)")
    root = model_dir(tmp_path / "m", {"model.py": wrong, "net.pt": ckpt}, modelFile="model.py", serializedFile="net.pt")
    with pytest.raises(RuntimeError, match="Error\\(s\\) in loading state_dict for Net") as info:
        load_handler(context_for(root))
    message = str(info.value)
    assert 'Missing key(s) in state_dict: "head.weight", "head.bias"' in message
    assert 'Unexpected key(s) in state_dict: "fc2.weight", "fc2.bias"' in message


MODULE_IMPORTS = "from serve import nn\n"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            MODULE_IMPORTS + "from serve.nn import Linear\nX = 1\n",
            r"exactly one nn.Module subclass .* found 0 \(none\)",
        ),
        (
            MODULE_IMPORTS + "class A(nn.Module):\n    pass\nclass B(nn.Module):\n    pass\n",
            r"found 2 \(A, B\): move helper modules to another file",
        ),
    ],
)
def test_model_file_needs_exactly_one_module_class(tmp_path, source, message):
    root = model_dir(tmp_path / "m", {"model.py": source}, modelFile="model.py")
    with pytest.raises(ValueError, match=message):
        load_handler(context_for(root))


def test_missing_model_file_says_what_to_do(tmp_path):
    root = model_dir(tmp_path / "m", {})
    with pytest.raises(RuntimeError, match=r"--model-file model\.py, or override load_model"):
        load_handler(context_for(root))


def test_model_without_serialized_file_keeps_its_constructor_weights(tmp_path):
    source = MODULE_IMPORTS + "class Double(nn.Module):\n    def forward(self, x):\n        return x * 2\n"
    root = model_dir(tmp_path / "m", {"model.py": source}, modelFile="model.py")
    ctx = context_for(root)
    assert load_handler(ctx).handle([{"data": [1.0, 2.0]}, {"body": b"[3, 4]"}], ctx) == [[2.0, 4.0], [6.0, 8.0]]


class Doubler(BaseHandler):
    """A handler that builds its model itself (no model file in the archive)."""

    def load_model(self, context):
        return lambda x: x * 2


def started(handler: BaseHandler, tmp_path: Path, headers=None, n: int = 3) -> Context:
    ctx = Context("d", str(tmp_path), None, n, None, "0.1.0")
    handler.initialize(ctx)
    ctx.begin_batch({i: f"r{i}" for i in range(n)}, headers or [{} for _ in range(n)])
    return ctx


def test_per_request_errors_leave_the_other_results_intact(tmp_path):
    handler = Doubler()
    ctx = started(handler, tmp_path, n=5)
    data = [{"data": [1.0]}, {"body": b"not json"}, {"body": b""}, {"data": {"a": 1}}, {"body": b"[5.0]"}]
    out = handler.handle(data, ctx)
    assert out[0] == [2.0] and out[4] == [10.0]
    assert out[1]["code"] == 400 and out[1]["type"] == "InvalidInput" and "could not parse" in out[1]["message"]
    assert out[2] == {"code": 400, "type": "InvalidInput",
                      "message": "the request has no input: send it as the request body or a 'data' field"}  # fmt: skip
    assert "got dict" in out[3]["message"]
    assert [ctx.get_response_status(i)[0] for i in range(5)] == [200, 400, 400, 400, 200]


def test_all_requests_rejected_skips_inference(tmp_path):
    handler = Doubler()
    ctx = started(handler, tmp_path, n=2)
    handler.inference = lambda data: pytest.fail("inference ran on an empty batch")
    out = handler.handle([{"body": b"x"}, {"body": b"y"}], ctx)
    assert [o["code"] for o in out] == [400, 400]


def test_prediction_exception_in_a_row_keeps_its_code(tmp_path):
    class Picky(Doubler):
        def preprocess(self, data):
            def check(payload):
                if payload == "too big":
                    raise PredictionException("payload too large for this model", 413)
                return [1.0]

            _, values = self.decode_rows(data, check)
            import serve

            return serve.tensor(values)

    handler = Picky()
    ctx = started(handler, tmp_path, n=2)
    out = handler.handle([{"data": "too big"}, {"data": "ok"}], ctx)
    assert out == [{"code": 413, "type": "PredictionException", "message": "payload too large for this model"}, [2.0]]
    assert ctx.get_response_status(0) == (413, "payload too large for this model")


def test_an_error_outside_the_rows_fails_the_batch(tmp_path):
    class Broken(Doubler):
        def inference(self, data, *args, **kwargs):
            raise PredictionException("model is out of memory", 507)

    handler = Broken()
    ctx = started(handler, tmp_path, n=1)
    with pytest.raises(PredictionException, match="out of memory"):
        handler.handle([{"data": [1.0]}], ctx)


def test_wrong_number_of_results_is_a_clear_error(tmp_path):
    class Short(Doubler):
        def postprocess(self, data):
            return []

    handler = Short()
    ctx = started(handler, tmp_path, n=2)
    with pytest.raises(RuntimeError, match="returned 0 results for the 1 requests that decoded"):
        handler.handle([{"data": [1.0]}, {"body": b"bad"}], ctx)


def test_describe_and_explain_headers(tmp_path):
    handler = Doubler()
    ctx = started(handler, tmp_path, headers=[{"describe": "True"}], n=1)
    assert handler.handle([{"data": [1.0]}], ctx) == [None]
    ctx.begin_batch({0: "r0"}, [{"explain": "True"}])
    with pytest.raises(PredictionException, match="explanations are not supported by Doubler") as info:
        handler.handle([{"data": [1.0]}], ctx)
    assert info.value.code == 501


def test_explain_uses_get_insights_when_the_handler_has_it(tmp_path):
    class Explained(Doubler):
        def get_insights(self, tensor, inputs, target):
            return [{"inputs": inputs, "target": target, "n": len(tensor)}]

    handler = Explained()
    ctx = started(handler, tmp_path, headers=[{"explain": "True"}], n=1)
    assert handler.handle([{"data": [1.0], "target": 2}], ctx) == [{"inputs": [1.0], "target": 2, "n": 1}]


def test_label_mapping_forms(tmp_path):
    assert load_label_mapping(tmp_path / "index_to_name.json") is None
    path = tmp_path / "index_to_name.json"
    path.write_text(json.dumps({"object_type_names": ["cat", "dog"]}))
    assert load_label_mapping(path) == {"0": "cat", "1": "dog"}
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold a JSON object"):
        load_label_mapping(path)
    path.write_text("{oops")
    with pytest.raises(ValueError, match="is not valid JSON"):
        load_label_mapping(path)


def test_initialize_reads_mapping_and_handler_config(tmp_path):
    (tmp_path / "index_to_name.json").write_text(json.dumps({"0": ["n01", "tench"], "1": "goldfish"}))
    handler = Doubler()
    ctx = Context("d", str(tmp_path), None, 1, None, "0.1.0", model_yaml_config={"handler": {"topk": 2}})
    handler.initialize(ctx)
    assert handler.handler_config == {"topk": 2} and str(handler.device) == "cpu"
    assert map_class_to_label([[0.25, 0.75]], handler.mapping) == [{"tench": 0.25, "goldfish": 0.75}]
    assert map_class_to_label([[0.9, 0.1]], {"0": "a"}, [[1, 0]]) == [{"1": 0.9, "a": 0.1}]
    assert map_class_to_label([[0.5, 0.5]]) == [{"0": 0.5, "1": 0.5}]


class Summer(BaseHandler):
    """A model that takes vectors of 3 numbers only: (B, 3) -> (B,) sums."""

    def load_model(self, context):
        def model(x):
            if tuple(x.shape[1:]) != (3,):
                raise ValueError(f"expected (B, 3), got {tuple(x.shape)}")
            return x.sum(1)

        return model


@pytest.mark.parametrize("position", [0, 1, 2])
def test_a_row_of_another_shape_fails_alone_at_any_position(tmp_path, position):
    handler = Summer()
    ctx = started(handler, tmp_path, n=3)
    data: list = [{"data": [1.0, 2.0, 3.0]}, {"body": b"[4, 5, 6]"}]
    data.insert(position, {"data": [[1.0, 2.0], [3.0, 4.0]]})
    out = handler.handle(data, ctx)
    assert [ctx.get_response_status(i)[0] for i in range(3)] == [400 if i == position else 200 for i in range(3)]
    assert "input of shape (2, 2) (ValueError: expected (B, 3)" in out[position]["message"]
    assert "it answers inputs of shape (3,)" in out[position]["message"]
    assert [o for i, o in enumerate(out) if i != position] == [6.0, 15.0]


def test_a_ragged_row_is_its_own_400(tmp_path):
    handler = Summer()
    ctx = started(handler, tmp_path, n=2)
    out = handler.handle([{"data": [[1.0, 2.0], [3.0]]}, {"data": [1.0, 2.0, 3.0]}], ctx)
    assert out[0]["code"] == 400 and "rectangular nested list" in out[0]["message"] and out[1] == 6.0


def test_an_explanation_batch_keeps_its_largest_shape(tmp_path):
    class Explained(Summer):
        def get_insights(self, tensor_data, _, target=0):
            return [[float(tensor_data.shape[0])]] * tensor_data.shape[0]

    handler = Explained()
    ctx = started(handler, tmp_path, headers=[{"explain": "True"}] * 3, n=3)
    out = handler.handle([{"data": [1.0, 2.0]}, {"data": [1.0, 2.0, 3.0]}, {"data": [4.0, 5.0, 6.0]}], ctx)
    assert out[0]["code"] == 400 and "explain inputs of one shape together" in out[0]["message"]
    assert out[1:] == [[2.0], [2.0]]
