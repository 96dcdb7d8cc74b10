"""TorchServe-shaped example archives, served unchanged by a real serve process, answering as PyTorch does.

Each folder here is an example in the form of TorchServe's (written from its documented contracts): model files
and handlers with `import torch`, `torchvision` and `ts` exactly as a TorchServe user writes them.
    mnist/               MNIST custom handler subclassing ImageClassifier (its own torchvision transforms)
    text_classification/ EmbeddingBag model called as model(text, offsets) by the built-in text_classifier
    custom_metrics/      a handler recording custom metrics through TorchServe's metrics API
    micro_batching/      TorchServe's MicroBatching handler (threads per stage) on an image classifier
    function_handler/    a module-level handle(data, context) driving a BaseHandler
The weights are made here by torch (seeded), the archives by serve's `model-archiver` with the flags TorchServe's
READMEs use, no `--torch-compat` (on by default for files that import torch/ts), and one server on 127.0.0.1
port 0 serves them all. The reference is the same model file imported with the real torch and the same state_dict,
on the same input: probabilities within 1e-5, the same labels and classes.
"""

from __future__ import annotations

import importlib.util
import io
import itertools
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from serve.cli.model_archiver import main as model_archiver
from tests.helpers import torch
from tests.integration.server import ServerProcess
from tests.torchvision_reference import reference_torchvision

HERE = Path(__file__).resolve().parent
TOL = 1e-5
NEWS = {"0": "World", "1": "Sports", "2": "Business", "3": "Sci/Tec"}
TEXTS = ["Stocks rally as markets rise", "The team wins the final!", "New chip doubles battery life", "peace talks"]
SHAPES = ["3x6", "2x8"]

pytestmark = pytest.mark.skipif(reference_torchvision() is None, reason="torch and torchvision are not installed")


def torch_module(path: Path):
    """The example's model file imported with the real torch: the reference."""
    spec = importlib.util.spec_from_file_location(f"ref_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_model(path: Path, cls: str, seed: int):
    torch.manual_seed(seed)
    model = getattr(torch_module(path), cls)()
    for m in model.modules():  # BatchNorm with statistics of its own, so eval mode matters
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return model.eval()


def archive(store: Path, *argv: str) -> None:
    assert model_archiver([*argv, "--export-path", str(store)]) == 0


def vocabulary() -> dict[str, int]:
    words = sorted({w for t in TEXTS for w in re.sub(r"[^\w\s]", "", t.lower()).split()})
    bigrams = ["stocks rally", "the team", "team wins", "battery life"]
    return {"<unk>": 0, **{token: i + 1 for i, token in enumerate(words + bigrams)}}


def build(work: Path, store: Path) -> dict[str, object]:
    """Weights by torch, archives by model-archiver; the reference models by name."""
    refs: dict[str, object] = {}
    d = HERE / "mnist"
    refs["mnist"] = make_model(d / "mnist.py", "Net", 1)
    torch.save(refs["mnist"].state_dict(), work / "mnist_cnn.pt")
    archive(store, "--model-name", "mnist", "--version", "1.0", "--model-file", str(d / "mnist.py"),
            "--serialized-file", str(work / "mnist_cnn.pt"), "--handler", str(d / "mnist_handler.py"))  # fmt: skip

    d = HERE / "text_classification"
    refs["news"] = make_model(d / "model.py", "TextSentiment", 2)
    torch.save(refs["news"].state_dict(), work / "model.pt")
    torch.save(vocabulary(), work / "source_vocab.pt")
    (work / "index_to_name.json").write_text(json.dumps(NEWS))
    archive(store, "--model-name", "my_text_classifier", "--version", "1.0", "--model-file", str(d / "model.py"),
            "--serialized-file", str(work / "model.pt"), "--handler", "text_classifier",
            "--extra-files", f"{work / 'index_to_name.json'},{work / 'source_vocab.pt'}")  # fmt: skip

    d = HERE / "custom_metrics"
    refs["metrics"] = make_model(d / "model.py", "Regressor", 3)
    torch.save(refs["metrics"].state_dict(), work / "metrics.pt")
    archive(store, "--model-name", "custom_metrics", "--version", "1.0", "--model-file", str(d / "model.py"),
            "--serialized-file", str(work / "metrics.pt"), "--handler", str(d / "handler.py"))  # fmt: skip

    d = HERE / "micro_batching"
    refs["micro"] = make_model(d / "model.py", "TinyConvNet", 4)
    torch.save(refs["micro"].state_dict(), work / "micro.pt")
    (work / "shapes" / "index_to_name.json").parent.mkdir()
    (work / "shapes" / "index_to_name.json").write_text(json.dumps({str(i): f"shape{i}" for i in range(6)}))
    archive(store, "--model-name", "micro_batching", "--version", "1.0", "--model-file", str(d / "model.py"),
            "--serialized-file", str(work / "micro.pt"), "--handler", str(d / "micro_batching_handler.py"),
            "--extra-files", str(work / "shapes" / "index_to_name.json"),
            "--config-file", str(d / "config.yaml"))  # fmt: skip

    d = HERE / "function_handler"
    refs["scorer"] = make_model(d / "model.py", "Scorer", 5)
    torch.save(refs["scorer"].state_dict(), work / "scorer.pt")
    archive(store, "--model-name", "scorer", "--version", "1.0", "--model-file", str(d / "model.py"),
            "--serialized-file", str(work / "scorer.pt"), "--handler", str(d / "handler.py"))  # fmt: skip
    return refs


MODELS = "mnist=mnist.mar,my_text_classifier=my_text_classifier.mar,custom_metrics=custom_metrics.mar," + (
    "micro_batching=micro_batching.mar,scorer=scorer.mar"
)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("ts_examples")
    work, store = base / "work", base / "store"
    work.mkdir()
    store.mkdir()
    refs = build(work, store)
    server = ServerProcess(base / "run", store, "--ncs", "--disable-token-auth", "--models", MODELS).start()
    try:
        yield server, refs
    finally:
        server.stop()


def predict(server: ServerProcess, model: str, **kwargs) -> object:
    response = httpx.post(f"{server.inference}/predictions/{model}", timeout=60, **kwargs)
    assert response.status_code == 200, f"{model}: {response.status_code} {response.text}\n{server.log()}"
    return response.json()


def encoded(image: Image.Image, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return buf.getvalue()


def test_mnist_custom_handler_answers_torchs_digit(served):
    transforms = reference_torchvision().transforms
    server, refs = served
    rng = np.random.default_rng(0)
    preprocess = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    for _ in range(4):
        image = Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8), mode="L")
        with torch.no_grad():
            logits = refs["mnist"](preprocess(image)[None])
        top2 = logits[0].topk(2).values
        assert float(top2[0] - top2[1]) > 1e-4  # a margin the 1e-5 agreement cannot flip
        assert predict(server, "mnist", content=encoded(image)) == int(logits.argmax(1))


def test_text_classifier_calls_model_text_offsets_as_torchserve(served):
    server, refs = served
    vocab = vocabulary()
    for text in TEXTS:
        tokens = re.sub(r"[^\w\s]", "", text.lower()).split()
        grams = tokens + [" ".join(pair) for pair in itertools.pairwise(tokens)]
        ids = torch.tensor([vocab.get(t, 0) for t in grams])
        with torch.no_grad():
            probs = torch.softmax(refs["news"](ids, torch.tensor([0])), dim=1)[0].tolist()
        got = predict(server, "my_text_classifier", content=text.encode())
        assert list(got) == list(NEWS.values())
        np.testing.assert_allclose(list(got.values()), probs, atol=TOL, rtol=0)


def test_custom_metrics_handler_answers_and_its_metrics_are_exported(served):
    server, refs = served
    x = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
    for row in x:
        got = predict(server, "custom_metrics", json=row.tolist())
        with torch.no_grad():
            ref = refs["metrics"](torch.from_numpy(row[None]))[0].tolist()
        np.testing.assert_allclose(got, ref, atol=TOL, rtol=0)
    page = httpx.get(f"{server.metrics}/metrics", timeout=30).text
    for name in ("ExampleRequestCount", "ExampleBatchSize", "ExampleInferenceTime", "ExampleRequestSize",
                 "ExampleBatchCount"):  # fmt: skip
        assert name in page, f"{name} missing from /metrics:\n{page[-3000:]}"
    count = re.search(r'^ExampleRequestCount\{ModelName="custom_metrics",.*\} (\S+)$', page, re.M)
    assert count and float(count.group(1)) == 3.0


def test_micro_batching_handler_answers_torchs_top_k_in_request_order(served):
    transforms = reference_torchvision().transforms
    server, refs = served
    rng = np.random.default_rng(2)
    images = [Image.fromarray(rng.integers(0, 256, (260 + 7 * i, 300, 3), dtype=np.uint8)) for i in range(4)]
    preprocess = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
                                     transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])  # fmt: skip
    with ThreadPoolExecutor(4) as pool:  # together, so the server batches them (batchSize 4) into micro-batches of 2
        answers = list(pool.map(lambda im: predict(server, "micro_batching", content=encoded(im, "JPEG")), images))
    for image, got in zip(images, answers):
        decoded = Image.open(io.BytesIO(encoded(image, "JPEG")))
        with torch.no_grad():
            probs, classes = torch.softmax(refs["micro"](preprocess(decoded)[None]), dim=1).topk(5, dim=1)
        assert list(got) == [f"shape{c}" for c in classes[0].tolist()]
        np.testing.assert_allclose(list(got.values()), probs[0].tolist(), atol=TOL, rtol=0)


def test_module_level_handle_function_answers_as_torch(served):
    server, refs = served
    x = np.random.default_rng(3).standard_normal((3, 5)).astype(np.float32)
    for row in x:
        got = predict(server, "scorer", json=row.tolist())
        with torch.no_grad():
            ref = refs["scorer"](torch.from_numpy(row[None]))[0].tolist()
        np.testing.assert_allclose(got, ref, atol=TOL, rtol=0)
