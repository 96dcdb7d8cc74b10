"""KServe envelopes reach a built-in handler (issue 19 item 2): the `image_classifier` digits model answers a KServe
v1 `{"data": "<base64>"}` instance and a v2 BYTES tensor (tritonclient.http, binary and JSON) exactly as it
answers the PNG posted to `/predictions` (the reference), on a real server process.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as triton

from serve.archive import package
from tests.integration.server import ServerProcess

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits"
PNG = (DIGITS / "sample.png").read_bytes()  # a held-out 7


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("envelopes")
    store = base / "store"
    package("digits", "1.0", "image_classifier", model_file=DIGITS / "model.py",
            serialized_file=DIGITS / "digits_lenet.pt", extra_files=[DIGITS / "index_to_name.json"],
            config_file=DIGITS / "model-config.yaml", export_path=store, torch_compat=True, progress=False)  # fmt: skip
    proc = ServerProcess(base / "run", store, "--ncs", "--disable-token-auth", "--models", "digits=digits.mar").start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def reference(server: ServerProcess) -> dict[str, float]:
    r = httpx.post(f"{server.inference}/predictions/digits", content=PNG, timeout=30)
    assert r.status_code == 200, r.text
    answer: dict[str, float] = r.json()
    assert max(answer, key=lambda k: answer[k]) == "7"
    return answer


def _close(got: dict[str, float], want: dict[str, float]) -> None:
    assert list(got) == list(want)  # same labels, same top-k order
    np.testing.assert_allclose(list(got.values()), list(want.values()), rtol=1e-5, atol=1e-7)


def test_kserve_v1_data_instance(server: ServerProcess, reference: dict[str, float]) -> None:
    body = {"instances": [{"data": base64.b64encode(PNG).decode()}, {"data": base64.b64encode(PNG).decode()}]}
    r = httpx.post(f"{server.inference}/v1/models/digits:predict", json=body, timeout=30)
    assert r.status_code == 200, r.text
    for prediction in r.json()["predictions"]:
        _close(prediction, reference)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_v2_bytes_tensor(server: ServerProcess, reference: dict[str, float], binary: bool) -> None:
    client = triton.InferenceServerClient(server.inference.removeprefix("http://"), network_timeout=30)
    try:
        tensor = triton.InferInput("INPUT0", [1], "BYTES")
        # binary: the PNG bytes themselves; JSON: base64 text (JSON cannot carry raw bytes), as KServe's examples
        element = PNG if binary else base64.b64encode(PNG)
        tensor.set_data_from_numpy(np.array([element], dtype=np.object_), binary_data=binary)
        result = client.infer("digits", [tensor])
        (text,) = result.as_numpy("INPUT0").tolist()  # named after the input, as TorchServe's kservev2 answers
        _close(json.loads(text), reference)
    finally:
        client.close()


def test_v2_two_images_in_one_request_is_400(server: ServerProcess) -> None:
    body = {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [2],
                        "data": [base64.b64encode(PNG).decode()] * 2}]}  # fmt: skip
    r = httpx.post(f"{server.inference}/v2/models/digits/infer", json=body, timeout=30)
    assert r.status_code == 400 and "one image or text per request" in r.json()["error"]
