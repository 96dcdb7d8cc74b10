"""TorchServe's Workflows/dog_breed_classification example on a real server: its workflow spec, handlers and
index_to_name.json unchanged, its arch files too but for the depth of the breed model (below).

The workflow: pre_processing (a function: base64 of the image) feeds cat_dog_classification (a ResNet-18 with its
own fc head, CatDogClassifier: 'cat' or 'dog') and dog_breed_classification (the example's ResNet-50 arch over 133
breeds, DogBreedClassifier, here with one Bottleneck block per stage instead of 3, 4, 6, 3: the same stem, block,
widths and 2048-feature head at a third of the cost, since this test checks the workflow, not ResNet-50's numbers,
which tests/unit/inference/test_zoo_parity.py checks against torchvision), which also gets cat_dog_classification's
answer: a node with two predecessors, which reads each by name (`row.get("cat_dog_classification")`,
`row.get("pre_processing")`). Both models are TorchServe ImageClassifier handlers on serve's `ts` compatibility,
archived with the README's model-archiver flags from the example's arch and handler files, the workflow with its
workflow-archiver flags; four pictures go at once (the spec's batch-size 4 per model).

Stand-in weights, made here by torch, seeded (the README's .pth files are trained downloads): batch norm statistics
calibrated on a few pictures (so activations stay in range through the layers), the breed head spread so the top 5
has a clear order, and the cat/dog head's bias set between the pictures' margins, so two of the four pictures are
dogs and two are cats. Reference: the example's pre_processing called by hand, then the same arch files on the
real torch and torchvision with the same weights and TorchServe's ImageClassifier steps (Resize 256, CenterCrop
224, ToTensor, ImageNet Normalize; argmax for cat/dog; softmax, top 5 named by index_to_name.json): "It's a cat!"
for cats, the same five breeds in the same order with probabilities within 1e-4 for dogs (measured 1.3e-7).
"""

from __future__ import annotations

import base64
import concurrent.futures
import io
import json
import subprocess
import sys

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.examples.ts_files import archive, example_files, image_bytes, torch_import
from tests.helpers import torch
from tests.integration.server import ServerProcess
from tests.torchvision_reference import reference_torchvision

# The Bottleneck ResNet in float32 through serve's plan (batch norm folded into the convolutions) against eager
# torch: the logits agree to ~1e-5 relative; measured 1.3e-7 in a probability (2.8e-5 with ResNet-50's depth)
TOL = 1e-4
TIMEOUT = 600  # the first request makes both models' inference plans; a loaded 2-core machine, not a target
PICTURES = [image_bytes(seed, (300, 260)) for seed in (11, 12, 13, 14)]

pytestmark = pytest.mark.skipif(reference_torchvision() is None, reason="torch and torchvision are not installed")


def preprocess():
    t = reference_torchvision().transforms
    return t.Compose([t.Resize(256), t.CenterCrop(224), t.ToTensor(),
                      t.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])  # fmt: skip


def batch() -> object:
    steps = preprocess()
    return torch.stack([steps(Image.open(io.BytesIO(p))) for p in PICTURES])


def calibrated(model, images):
    """Batch norm running statistics of these images (cumulative: momentum None), then eval."""
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None
    model.train()
    with torch.no_grad():
        model(images)
    return model.eval()


def cat_dog_weights(arch):
    torch.manual_seed(18)
    images = batch()
    model = calibrated(torch_import(arch).ImageClassifier(), images)
    with torch.no_grad():
        logits = model(images)
        margin = logits[:, 1] - logits[:, 0]  # dog minus cat
        low, high = margin.sort().values[1:3]
        assert float(high - low) > 1e-3 * float(margin.abs().max()), "no clear split of the pictures"
        model.fc[-1].bias[1] -= float(low + high) / 2  # two dogs, two cats
    return model


def dog_breed_weights(arch):
    torch.manual_seed(50)
    model = calibrated(torch_import(arch).ImageClassifier(), batch())
    with torch.no_grad():
        model.fc.weight.mul_(20.0)  # a spread top 5
    return model


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("ts_dog_breed")
    src = example_files(base, "Workflows/dog_breed_classification")
    arch = src / "dog_breed_classification_arch.py"  # ResNet-50's [3, 4, 6, 3] blocks: one per stage (see above)
    assert "super(ImageClassifier, self).__init__(Bottleneck, [3, 4, 6, 3])" in arch.read_text()
    arch.write_text(arch.read_text().replace("[3, 4, 6, 3]", "[1, 1, 1, 1]"))
    store, wf_store = src / "model_store", src / "wf_store"
    store.mkdir()
    wf_store.mkdir()
    refs = {"cat_dog": cat_dog_weights(src / "cat_dog_classification_arch.py"),
            "dog_breed": dog_breed_weights(src / "dog_breed_classification_arch.py")}  # fmt: skip
    for name, model in refs.items():
        torch.save(model.state_dict(), base / f"{name}_classification.pth")
    # the README's commands
    archive(store, "-f", "--model-name", "cat_dog_classification", "--version", "1.0", "--model-file",
            str(src / "cat_dog_classification_arch.py"), "--serialized-file", str(base / "cat_dog_classification.pth"),
            "--handler", str(src / "cat_dog_classification_handler.py"))  # fmt: skip
    archive(store, "-f", "--model-name", "dog_breed_classification", "--version", "1.0", "--model-file",
            str(src / "dog_breed_classification_arch.py"), "--serialized-file",
            str(base / "dog_breed_classification.pth"), "--handler", str(src / "dog_breed_classification_handler.py"),
            "--extra-files", str(src / "index_to_name.json"))  # fmt: skip
    run = subprocess.run([sys.executable, "-m", "serve.cli.workflow_archiver", "-f", "--workflow-name", "dog_breed_wf",
                          "--spec-file", str(src / "workflow_dog_breed_classification.yaml"), "--handler",
                          str(src / "workflow_dog_breed_classification_handler.py"), "--export-path", f"{wf_store}/"],
                         capture_output=True, text=True, timeout=TIMEOUT)  # fmt: skip
    assert run.returncode == 0, run.stderr
    server = ServerProcess(base / "run", store, "--workflow-store", str(wf_store), "--ncs", "--disable-token-auth",
                           "--enable-model-api").start()  # fmt: skip
    try:
        yield server, refs, src
    finally:
        server.stop()


def expected_answers(refs, src) -> list[object]:
    """The example's pre_processing by hand, then each model's handler steps on torch."""
    b64 = torch_import(src / "workflow_dog_breed_classification_handler.py").pre_processing(
        [{"body": p} for p in PICTURES], None
    )
    steps = preprocess()
    images = torch.stack([steps(Image.open(io.BytesIO(base64.b64decode(s)))) for s in b64])
    labels = json.loads((src / "index_to_name.json").read_text())
    answers: list[object] = []
    with torch.no_grad():
        is_dog = refs["cat_dog"](images).argmax(dim=1).tolist()
        logits = refs["dog_breed"](images)
    for row, dog in zip(logits, is_dog, strict=True):
        if not dog:
            answers.append("It's a cat!")
            continue
        top = row.topk(6).values
        assert float((top[:-1] - top[1:]).min()) > 1e-4 * float(row.abs().max()), "no clear top-5 order"
        probs, classes = torch.softmax(row, dim=0).topk(5)
        answers.append({labels.get(str(c), str(c)): p for c, p in zip(classes.tolist(), probs.tolist(), strict=True)})
    assert sorted(map(type, answers), key=str) == [dict, dict, str, str]  # both branches of the example
    return answers


def test_dog_breed_workflow_answers_torchs(served) -> None:
    server, refs, src = served
    with httpx.Client(timeout=TIMEOUT) as client:
        r = client.post(f"{server.management}/workflows", params={"url": "dog_breed_wf.war"})
        assert r.status_code == 200, f"{r.text}\n{server.log()}"
        assert r.json() == {"status": "Workflow dog_breed_wf has been registered and scaled successfully."}
        url = f"{server.inference}/wfpredict/dog_breed_wf"
        with concurrent.futures.ThreadPoolExecutor(len(PICTURES)) as pool:
            got = list(pool.map(lambda body: client.put(url, content=body), PICTURES))
    for answer, want in zip(got, expected_answers(refs, src), strict=True):
        assert answer.status_code == 200, f"{answer.text}\n{server.log()}"
        if isinstance(want, str):
            assert answer.text == want
            continue
        ours = answer.json()
        assert list(ours) == list(want)
        np.testing.assert_allclose(list(ours.values()), list(want.values()), atol=TOL, rtol=0)
