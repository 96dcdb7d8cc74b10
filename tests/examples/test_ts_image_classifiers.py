"""TorchServe's image_classifier/mnist and image_classifier/vgg_16 examples, their files unchanged, on a real server.

mnist: `mnist.py` (its Net) and `mnist_handler.py`, the current one, which imports `ProfilerActivity` from
`torch.profiler` and fills `profiler_args` in `__init__`. vgg_16: `model.py` (torchvision's VGG with `cfgs['D']`),
`vgg_handler.py`, which overrides `_load_pickled_model` to import the model file with `importlib.import_module`
inside `initialize` and loads it with `torch.load`, and `model-config.yaml`, which asks for
`pt2: {compile: {enable: True}}` (warned and ignored: serve plans the eager model itself). Each archive is made
with the flags of the example's README (vgg_16: the compiled variant, with `--config-file`), from a copy of the
files in tmp_path; the weights are stand-ins made here by torch, seeded (the README's `mnist_cnn.pt` and
`vgg16-397923af.pth` are downloads); one server on 127.0.0.1 port 0 serves both.

References, the same model file on the real torch and torchvision with the same state_dict, and the handler's logic
written out in torch: mnist, ToTensor and Normalize((0.1307,), (0.3081,)) then argmax (the digit equal where the
top two log-probabilities are apart); vgg_16, TorchServe's ImageClassifier (Resize 256, CenterCrop 224,
ToTensor, Normalize with ImageNet's statistics, softmax, top 5 named by index_to_name.json): the same five names in
the same order and probabilities within 1e-5.
"""

from __future__ import annotations

import io
import json

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.examples.ts_files import TORCHSERVE, archive, example_files, image_bytes, torch_import
from tests.helpers import torch
from tests.integration.server import ServerProcess
from tests.torchvision_reference import reference_torchvision

TOL = 1e-5

pytestmark = pytest.mark.skipif(reference_torchvision() is None, reason="torch and torchvision are not installed")


def vgg16_weights(model_file):
    """torchvision's VGG initialisation (the example builds with init_weights=False), seeded, and the last layer's
    weights spread so the top 5 has a clear order."""
    torch.manual_seed(16)
    model = torch_import(model_file).ImageClassifier()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d):
                torch.nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                torch.nn.init.uniform_(m.bias, -0.05, 0.05)
            elif isinstance(m, torch.nn.Linear):
                torch.nn.init.normal_(m.weight, 0, 0.01)
                torch.nn.init.uniform_(m.bias, -0.05, 0.05)
        model.classifier[-1].weight.mul_(40.0)
    return model.eval()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("ts_image_classifiers")
    store = base / "store"
    store.mkdir()
    mnist = example_files(base, "image_classifier/mnist")
    torch.manual_seed(0)
    refs = {"mnist": torch_import(mnist / "mnist.py").Net().eval()}
    torch.save(refs["mnist"].state_dict(), mnist / "mnist_cnn.pt")
    archive(store, "--model-name", "mnist", "--version", "1.0", "--model-file", str(mnist / "mnist.py"),
            "--serialized-file", str(mnist / "mnist_cnn.pt"), "--handler", str(mnist / "mnist_handler.py"))  # fmt: skip

    vgg = example_files(base, "image_classifier/vgg_16")
    labels = base / "image_classifier" / "index_to_name.json"  # examples/image_classifier/index_to_name.json
    labels.write_bytes((TORCHSERVE / "image_classifier" / "index_to_name.json").read_bytes())
    refs["vgg16"] = vgg16_weights(vgg / "model.py")
    weights = vgg / "vgg16-397923af.pth"
    torch.save(refs["vgg16"].state_dict(), weights)
    archive(store, "--model-name", "vgg16", "--version", "1.0", "--model-file", str(vgg / "model.py"),
            "--serialized-file", str(weights), "--handler", str(vgg / "vgg_handler.py"), "--extra-files",
            str(labels), "--config-file", str(vgg / "model-config.yaml"), "-f")  # fmt: skip
    weights.unlink()  # 528 MB: the archive holds it
    server = ServerProcess(base / "run", store, "--ncs", "--disable-token-auth", "--models",
                           "mnist=mnist.mar,vgg16=vgg16.mar", default_workers_per_model=1).start()  # fmt: skip
    try:
        yield server, refs, json.loads(labels.read_text())
    finally:
        server.stop()


def predict(server: ServerProcess, name: str, body: bytes) -> object:
    response = httpx.post(f"{server.inference}/predictions/{name}", content=body, timeout=300)
    assert response.status_code == 200, f"{name}: {response.status_code} {response.text[:500]}\n{server.log()}"
    return response.json()


def test_mnist_example_answers_torchs_digit(served):
    server, refs, _ = served
    t = reference_torchvision().transforms
    preprocess = t.Compose([t.ToTensor(), t.Normalize((0.1307,), (0.3081,))])
    compared = 0
    for seed in range(8):
        body = image_bytes(seed, (28, 28), gray=True, fmt="PNG")
        with torch.no_grad():
            log_probs = refs["mnist"](preprocess(Image.open(io.BytesIO(body)))[None])[0]
        top2 = log_probs.topk(2).values
        if float(top2[0] - top2[1]) < 1e-4:  # too close for the 1e-5 agreement to decide the digit
            continue
        assert predict(server, "mnist", body) == int(log_probs.argmax())
        compared += 1
    assert compared >= 4, "fewer than 4 of 8 pictures have a clear digit"


def test_vgg16_example_answers_torchvisions_top_5(served):
    server, refs, labels = served
    t = reference_torchvision().transforms
    preprocess = t.Compose([t.Resize(256), t.CenterCrop(224), t.ToTensor(),
                            t.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])  # fmt: skip
    body = image_bytes(3, (300, 260))
    with torch.no_grad():
        logits = refs["vgg16"](preprocess(Image.open(io.BytesIO(body)).convert("RGB"))[None])
    top_logits = logits.topk(6, dim=1).values[0]
    assert float((top_logits[:-1] - top_logits[1:]).min()) > 1e-4 * float(logits.abs().max()), "no clear top-5 order"
    probs, classes = torch.softmax(logits, dim=1).topk(5, dim=1)
    want = {labels[str(c)][1]: p for c, p in zip(classes[0].tolist(), probs[0].tolist(), strict=True)}
    got = predict(server, "vgg16", body)
    assert list(got) == list(want)
    np.testing.assert_allclose(list(got.values()), list(want.values()), atol=TOL, rtol=0)
