"""TorchServe's object_detector/fast-rcnn and object_detector/maskrcnn examples, files unchanged, on a real server.

fast-rcnn's `model.py` subclasses FasterRCNN over `resnet_fpn_backbone('resnet50', True)`: pretrained, so the
worker reads torchvision's legacy ResNet-50 file, `resnet50-0676ba61.pth`, from the torch hub cache, as TorchServe's
worker does after its first download (here a seeded stand-in, put in a TORCH_HOME of the test's own, which the
server's workers and the reference both read). maskrcnn's subclasses MaskRCNN over `resnet_fpn_backbone('resnet50',
False)`. Both are archived with their README's flags (`--handler object_detector --extra-files
index_to_name.json`, COCO's names from examples/object_detector/) and stand-in checkpoints made here by torch
(seeded, FrozenBatchNorm statistics of their own, class scores spread so some detections pass the handler's 0.5),
and served by one server on 127.0.0.1 port 0, with the default response and startup timeouts: each worker plans its
detector before it is ready (serve/inference/detections.py's warm-up input, kernels timed within optimize_warmup_s),
so the first request no longer pays 59-90 s for the plan. The models run at their own sizes (800 / 1333): the
example's file fixes them.

Reference: the same model file on the real torch and torchvision with the same state_dict, its compiled nms and
roi_align replaced by test_detection.py's stand-ins; TorchServe's object_detector logic (ToTensor, the model,
detections scoring >= 0.5 as `{label: box, "score": s}`): the same detections, compared as sets (each of torch's
matched to serve's of the same label with the nearest box: scores tied within rounding may come in either order),
boxes within BOX_TOL pixels, scores within SCORE_TOL. Mask R-CNN's masks are computed in the worker but the handler
does not return them; tests/unit/compat/torchvision/test_mask_rcnn.py compares them.
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
from tests.unit.compat.torchvision.test_detection import torchvision_detection  # noqa: F401 (a fixture)

BOX_TOL = 2e-3  # pixels of the 320 x 240 input
SCORE_TOL = 2e-5  # see tests/examples/tv_dense: float32 through ResNet-50-FPN, RoIAlign and the box head
THRESHOLD = 0.5  # the object_detector handler's
# name: (folder, class, checkpoint file of the README, the factor on the class scores' weights that lets 10-20 of
# the 100 detections of the test's picture pass 0.5, none within 5e-4 of it: measured with these seeds)
EXAMPLES = {
    "fastrcnn": ("fast-rcnn", "FRCNNObjectDetector", "fasterrcnn_resnet50_fpn_coco-258fb6c6.pth", 1.3),
    "maskrcnn": ("maskrcnn", "MASKRCNNObjectDetector", "maskrcnn_resnet50_fpn_coco-bf2d0c1e.pth", 0.7),
}

pytestmark = pytest.mark.skipif(reference_torchvision() is None, reason="torch and torchvision are not installed")


def stand_in(model_file, cls: str, seed: int, spread: float):
    torch.manual_seed(seed)
    model = getattr(torch_import(model_file), cls)()
    with torch.no_grad():
        for m in model.modules():
            if type(m).__name__ == "FrozenBatchNorm2d":
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 2.0)
        model.roi_heads.box_predictor.cls_score.weight.mul_(spread)
    return model.eval()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("ts_detectors")
    store, hub = base / "store", base / "torch_home" / "hub" / "checkpoints"
    store.mkdir()
    hub.mkdir(parents=True)
    torch.manual_seed(5)  # the ImageNet ResNet-50 that pretrained=True reads (its keys, torchvision's file name)
    torch.save(reference_torchvision().models.resnet50().state_dict(), hub / "resnet50-0676ba61.pth")
    labels = base / "object_detector" / "index_to_name.json"
    labels.parent.mkdir()
    labels.write_bytes((TORCHSERVE / "object_detector" / "index_to_name.json").read_bytes())
    refs = {}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TORCH_HOME", str(base / "torch_home"))
        for seed, (name, (folder, cls, checkpoint, spread)) in enumerate(EXAMPLES.items()):
            src = example_files(base, f"object_detector/{folder}")
            refs[name] = stand_in(src / "model.py", cls, seed, spread)
            torch.save(refs[name].state_dict(), src / checkpoint)
            archive(store, "--model-name", name, "--version", "1.0", "--model-file", str(src / "model.py"),
                    "--serialized-file", str(src / checkpoint), "--handler", "object_detector",
                    "--extra-files", str(labels))  # fmt: skip
            (src / checkpoint).unlink()
        server = ServerProcess(base / "run", store, "--ncs", "--disable-token-auth", "--models",
                               "fastrcnn=fastrcnn.mar,maskrcnn=maskrcnn.mar",
                               default_workers_per_model=1).start()  # fmt: skip
    try:
        yield server, refs, json.loads(labels.read_text())
    finally:
        server.stop()


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_detector_example_answers_torchvisions_detections(served, torchvision_detection, name):  # noqa: F811
    server, refs, names = served
    body = image_bytes(1, (320, 240))
    to_tensor = reference_torchvision().transforms.ToTensor()
    with torch.no_grad():
        (want,) = refs[name]([to_tensor(Image.open(io.BytesIO(body)).convert("RGB"))])
    keep = want["scores"] >= THRESHOLD
    scores = want["scores"].numpy()
    assert 1 <= int(keep.sum()) < len(scores), f"{int(keep.sum())} of {len(scores)} pass {THRESHOLD}: unfair"
    assert np.abs(scores - THRESHOLD).min() > 1e-4  # no detection the score tolerance could move across the cut
    response = httpx.post(f"{server.inference}/predictions/{name}", content=body, timeout=900)
    assert response.status_code == 200, f"{name}: {response.status_code} {response.text[:500]}\n{server.log()}"
    (worker,) = httpx.get(f"{server.management}/models/{name}", timeout=60).json()[0]["workers"]
    assert worker["warmedBatchSizes"] == [1], worker  # planned before it was ready, not by this request
    print(f"{name}: optimized {worker['optimized']} ({worker['optimizeReason']})")
    got = [(next(k for k in d if k != "score"), np.asarray(next(v for k, v in d.items() if k != "score")), d["score"])
           for d in response.json()]  # fmt: skip
    want_rows = zip([names[str(i)] for i in want["labels"][keep].tolist()], want["boxes"][keep].numpy(),
                    scores[keep.numpy()])  # fmt: skip
    assert len(got) == int(keep.sum())
    for label, box, score in want_rows:  # as sets: scores tied within rounding may come in either order
        same = [g for g in got if g[0] == label]
        assert same, f"{name}: no {label} detected, want {box} {score}"
        nearest = min(same, key=lambda g: float(np.abs(g[1] - box).max()))
        np.testing.assert_allclose(nearest[1], box, atol=BOX_TOL, rtol=0)
        np.testing.assert_allclose(nearest[2], score, atol=SCORE_TOL, rtol=0)
        got.remove(nearest)
