"""TorchServe's image classifier examples, as a TorchServe user has them, served by a real serve process.

Each folder (resnet_18, squeezenet, densenet_161, alexnet, vgg_11: 530 MB of weights, the slow one) holds a model
file in the form of TorchServe's `examples/image_classifier/*/model.py` (written here
from its documented shape): `from torchvision.models.<arch> import <Class>` and an `ImageClassifier` subclass.
The weights are made here by torch 2.13 (seeded; BatchNorm statistics and a spread-out last layer so eval mode and
the top-5 order mean something), archived with the flags of TorchServe's README (`--handler image_classifier
--extra-files index_to_name.json`, no `--torch-compat`: on by default for files importing torchvision), and served
on 127.0.0.1 port 0. The reference is the same model file imported with the real torch and torchvision, the same
state_dict and TorchServe's image_classifier preprocessing (Resize 256, CenterCrop 224, ToTensor, Normalize) with
the real torchvision on the same decoded image: top-5 labels equal, probabilities within 1e-5.
"""

from __future__ import annotations

import importlib.util
import io
import json
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
# model name (TorchServe's README), folder, the last layer and the factor that spreads its logits out
EXAMPLES = [("resnet-18", "resnet_18", "fc", 4.0), ("squeezenet1_1", "squeezenet", "classifier.1", 4.0),
            ("densenet161", "densenet_161", "classifier", 4.0),
            ("alexnet", "alexnet", "classifier.6", 100.0), ("vgg11", "vgg_11", "classifier.6", 100.0)]  # fmt: skip

pytestmark = pytest.mark.skipif(reference_torchvision() is None, reason="torch and torchvision are not installed")


def torch_model(folder: str):
    """The example's ImageClassifier imported with the real torch and torchvision: the reference."""
    path = HERE / folder / "model.py"
    spec = importlib.util.spec_from_file_location(f"ref_tv_{folder}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ImageClassifier()


def make_weights(folder: str, last: str, spread: float, seed: int):
    torch.manual_seed(seed)
    model = torch_model(folder)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 2.0)
        model.get_submodule(last).weight.mul_(spread)  # logits spread over several units: a clear top-5 order
    return model.eval()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("tv_image_classifiers")
    work, store = base / "work", base / "store"
    work.mkdir()
    store.mkdir()
    categories = reference_torchvision().models.ResNet18_Weights.DEFAULT.meta["categories"]
    (work / "index_to_name.json").write_text(json.dumps({str(i): name for i, name in enumerate(categories)}))
    refs = {}
    for seed, (name, folder, last, spread) in enumerate(EXAMPLES):
        refs[name] = make_weights(folder, last, spread, seed)
        weights = work / f"{folder}.pth"
        torch.save(refs[name].state_dict(), weights)
        argv = ["--model-name", name, "--version", "1.0", "--model-file", str(HERE / folder / "model.py"),
                "--serialized-file", str(weights), "--handler", "image_classifier",
                "--extra-files", str(work / "index_to_name.json"), "--export-path", str(store)]  # fmt: skip
        assert model_archiver(argv) == 0
        weights.unlink()
    models = ",".join(f"{name}={name}.mar" for name, *_ in EXAMPLES)
    server = ServerProcess(base / "run", store, "--ncs", "--disable-token-auth", "--models", models,
                           default_workers_per_model=1).start()  # fmt: skip
    try:
        yield server, refs, categories
    finally:
        server.stop()


def jpeg(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    smooth = rng.integers(0, 256, (9, 10, 3), dtype=np.uint8)  # a smooth picture survives JPEG like a photo does
    image = Image.fromarray(smooth).resize((300, 260), Image.Resampling.BICUBIC)
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def torchserve_answer(model, body: bytes, categories) -> dict[str, float] | None:
    """TorchServe's image_classifier on real torch: its preprocessing, softmax, top 5 mapped to names; None when
    two of the top 6 logits are too close for the order to be a fair test (serve's logits are within ~3e-6 of
    the largest |logit|; the gaps asked for are 30 times that)."""
    t = reference_torchvision().transforms
    preprocess = t.Compose([t.Resize(256), t.CenterCrop(224), t.ToTensor(),
                            t.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])  # fmt: skip
    with torch.no_grad():
        logits = model(preprocess(Image.open(io.BytesIO(body)).convert("RGB"))[None])
    top_logits = logits.topk(6, dim=1).values[0]
    if float((top_logits[:-1] - top_logits[1:]).min()) < 1e-4 * float(logits.abs().max()):
        return None
    top, classes = torch.softmax(logits, dim=1).topk(5, dim=1)
    return {categories[c]: p for c, p in zip(classes[0].tolist(), top[0].tolist(), strict=True)}


@pytest.mark.parametrize("name", [name for name, *_ in EXAMPLES])
def test_image_classifier_answers_torchvisions_top_5(served, name):
    server, refs, categories = served
    compared = 0
    for seed in range(12):  # the first two pictures whose top 5 has a clear order
        body = jpeg(seed)
        want = torchserve_answer(refs[name], body, categories)
        if want is None:
            continue
        response = httpx.post(f"{server.inference}/predictions/{name}", content=body, timeout=120)
        assert response.status_code == 200, f"{name}: {response.status_code} {response.text}\n{server.log()}"
        got = response.json()
        assert list(got) == list(want)
        np.testing.assert_allclose(list(got.values()), list(want.values()), atol=TOL, rtol=0)
        compared += 1
        if compared == 2:
            return
    pytest.fail(f"{name}: fewer than two of 12 pictures have a clear top-5 order")


def test_the_archives_are_torchserves_shape(served):
    server, _, _ = served
    models = httpx.get(f"{server.management}/models", timeout=30).json()["models"]
    assert sorted(m["modelName"] for m in models) == sorted(name for name, *_ in EXAMPLES)
    for _, folder, *_ in EXAMPLES:
        source = (HERE / folder / "model.py").read_text()
        assert "from torchvision.models." in source and "import serve" not in source
