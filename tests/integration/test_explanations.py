"""Explanations on a real server (issue 18 item 5): the digits model with the built-in `image_classifier` answers
`POST /explanations/digits` (and the v2 `/explain` route) with TorchServe's JSON, one (C, H, W) nested list of
integrated-gradients attributions per request, equal to what handlers/explanations.py computes in this process on
the same preprocessed image; the same model behind `base_handler` (no `get_insights`) answers 501 saying so.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

import serve
import serve.nn.functional as F
from handlers.explanations import integrated_gradients
from handlers.transforms import build_image_processing
from serve import nn
from serve.archive import package
from tests.integration.server import ServerProcess

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits"
PNG = (DIGITS / "sample.png").read_bytes()  # a held-out 7


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("explanations")
    store = base / "store"
    for name, handler in (("digits", "image_classifier"), ("plain", "base_handler")):
        package(name, "1.0", handler, model_file=DIGITS / "model.py", serialized_file=DIGITS / "digits_lenet.pt",
                extra_files=[DIGITS / "index_to_name.json"], config_file=DIGITS / "model-config.yaml",
                export_path=store, torch_compat=True, progress=False)  # fmt: skip
    proc = ServerProcess(base / "run", store, "--ncs", "--disable-token-auth", "--models", "digits=digits.mar",
                         "plain=plain.mar").start()  # fmt: skip
    try:
        yield proc
    finally:
        proc.stop()


class DigitsNet(nn.Module):
    """examples/digits/model.py written with serve.nn (same layers, same state_dict keys)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 6, 5), nn.Conv2d(6, 16, 5)
        self.fc1, self.fc2, self.fc3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # (N, 6, 14, 14)
        x = serve.flatten(F.max_pool2d(F.relu(self.conv2(x)), 2), 1)  # (N, 400)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))  # (N, 10)


def reference(target: int) -> np.ndarray:
    """The attributions computed here: the digits model, the model-config's transforms, 15 steps (TorchServe's)."""
    model = DigitsNet()
    model.load_state_dict(serve.load(DIGITS / "digits_lenet.pt", map_location="cpu"))
    processing = build_image_processing(32, 32, mean=[0.3057], std=[0.3235], grayscale=True)
    image = serve.from_numpy(np.asarray(processing(Image.open(BytesIO(PNG))))[None])
    attributions, _ = integrated_gradients(model.eval(), image, target, n_steps=15)
    return attributions.numpy()[0]


def test_explanations_answer_torchserve_shape_and_our_numbers(server: ServerProcess) -> None:
    r = httpx.post(f"{server.inference}/explanations/digits", files={"data": ("7.png", PNG, "image/png")},
                   data={"target": "7"}, timeout=60)  # fmt: skip
    assert r.status_code == 200, r.text
    got = np.array(r.json())
    assert got.shape == (1, 32, 32)  # (C, H, W) of the model's input, as nested lists
    np.testing.assert_allclose(got, reference(7), rtol=1e-4, atol=1e-6 * np.abs(got).max())
    default = httpx.post(f"{server.inference}/explanations/digits", content=PNG, timeout=60)
    assert default.status_code == 200
    np.testing.assert_allclose(np.array(default.json()), reference(0), rtol=1e-4, atol=1e-6 * np.abs(got).max())


def test_v2_explain_route_answers_the_same(server: ServerProcess) -> None:
    body = {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1], "data": [base64.b64encode(PNG).decode()]}]}
    r = httpx.post(f"{server.inference}/v2/models/digits/explain", json=body, timeout=60)
    assert r.status_code == 200, r.text
    (output,) = r.json()["outputs"]  # as TorchServe's kservev2 envelope: named after the input, flattened
    assert output["name"] == "INPUT0" and output["shape"] == [1024] and output["datatype"] in ("FP32", "FP64")
    got = np.array(output["data"]).reshape(1, 32, 32)
    np.testing.assert_allclose(got, reference(0), rtol=1e-4, atol=1e-6 * np.abs(got).max())


def test_a_handler_without_explanations_answers_501_saying_so(server: ServerProcess) -> None:
    r = httpx.post(f"{server.inference}/explanations/plain", json=np.zeros((1, 1, 32, 32)).tolist(), timeout=60)
    assert r.status_code == 501, r.text
    assert "explanations are not supported by" in r.text and "get_insights" in r.text
