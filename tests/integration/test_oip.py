"""Open Inference Protocol and KServe v1 against a real `serve` process, with the reference client tritonclient.http.

Two archives: `lin` (the built-in `tensor` handler, a serve.nn Linear(4, 3) saved with serve.save, model-config
`handler: {dtype, inputs, outputs}`) and `upper` (a function handler that answers v2 BYTES outputs).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from serve.archive import package
from tests.integration.server import UPPER, ServerProcess, lin_archive


def _archives(base: Path, store: Path) -> None:
    src = base / "src"
    lin_archive(src, store)
    (src / "upper.py").write_text(UPPER)
    package("upper", "1.0", f"{src / 'upper.py'}:handle", export_path=store, progress=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("oip")
    store = base / "store"
    store.mkdir()
    _archives(base, store)
    flags = ("--ncs", "--disable-token-auth", "--models", "lin=lin.mar,upper=upper.mar")
    proc = ServerProcess(base / "run", store, *flags).start()
    try:
        client = triton.InferenceServerClient(_url(proc), network_timeout=30)
        deadline = time.monotonic() + 60
        while not (client.is_model_ready("lin") and client.is_model_ready("upper")):
            assert time.monotonic() < deadline, f"models not ready within 60 s:\n{proc.log()}"
            time.sleep(0.2)
        yield proc
    finally:
        proc.stop()


def _url(proc: ServerProcess) -> str:
    return proc.inference.removeprefix("http://")


@pytest.fixture
def client(server: ServerProcess) -> Iterator[triton.InferenceServerClient]:
    c = triton.InferenceServerClient(_url(server), network_timeout=30)
    yield c
    c.close()


def _predictions(server: ServerProcess, x: np.ndarray) -> np.ndarray:
    """The REST `/predictions` answer, one request per row (the reference for v2's rows)."""
    rows = [httpx.post(f"{server.inference}/predictions/lin", json=row.tolist(), timeout=30) for row in x]
    assert all(r.status_code == 200 for r in rows), [r.text for r in rows]
    return np.array([r.json() for r in rows], dtype=np.float32)


def test_health_and_metadata(client: triton.InferenceServerClient) -> None:
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("lin") and client.is_model_ready("lin", "1.0")
    assert not client.is_model_ready("nope")
    meta = client.get_model_metadata("lin")
    assert meta["name"] == "lin" and meta["versions"] == ["1.0"]
    assert meta["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}]
    assert meta["outputs"] == [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 3]}]
    assert "binary_tensor_data" in client.get_server_metadata()["extensions"]
    with pytest.raises(InferenceServerException, match="Model not found: nope"):
        client.get_model_metadata("nope")


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64], ids=["FP32", "INT64"])
def test_infer_equals_predictions(server: ServerProcess, client: triton.InferenceServerClient, binary: bool,
                                  dtype: type) -> None:  # fmt: skip
    x: np.ndarray = (np.arange(12).reshape(3, 4) - 5).astype(dtype)
    tensor = triton.InferInput("INPUT0", [3, 4], "FP32" if dtype == np.float32 else "INT64")
    tensor.set_data_from_numpy(x, binary_data=binary)
    outputs = [triton.InferRequestedOutput("OUTPUT0", binary_data=binary)]
    result = client.infer("lin", [tensor], outputs=outputs, request_id="req-1")
    got = result.as_numpy("OUTPUT0")
    assert got.dtype == np.float32 and got.shape == (3, 3)
    np.testing.assert_allclose(got, _predictions(server, x), rtol=1e-6, atol=1e-6)
    response = result.get_response()
    assert (response["model_name"], response["model_version"], response["id"]) == ("lin", "1.0", "req-1")


def test_infer_with_default_outputs_and_version(server: ServerProcess, client: triton.InferenceServerClient) -> None:
    x = np.ones((1, 4), np.float32)
    tensor = triton.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer("lin", [tensor], model_version="1.0")  # binary_data_output: true
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), _predictions(server, x), rtol=1e-6, atol=1e-6)


def test_infer_errors(client: triton.InferenceServerClient) -> None:
    wrong = triton.InferInput("OTHER", [1, 4], "FP32")
    wrong.set_data_from_numpy(np.ones((1, 4), np.float32))
    with pytest.raises(InferenceServerException, match="this model's input is 'INPUT0'"):
        client.infer("lin", [wrong])
    bad_shape = triton.InferInput("INPUT0", [1, 5], "FP32")
    bad_shape.set_data_from_numpy(np.ones((1, 5), np.float32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("lin", [bad_shape])
    declared = "[1, 5] contradicts the model-config's declared input shape [-1, 4]"  # the model takes 4 features
    assert info.value.status() == "400" and declared in str(info.value.message())
    with pytest.raises(InferenceServerException, match="Model not found"):
        client.infer("nope", [wrong])


def test_bytes_round_trip(client: triton.InferenceServerClient) -> None:
    words = np.array([b"hello", b"v2", "é".encode()], dtype=np.object_)
    for binary in (True, False):
        tensor = triton.InferInput("TEXT", [3], "BYTES")
        tensor.set_data_from_numpy(words, binary_data=binary)
        result = client.infer("upper", [tensor], outputs=[triton.InferRequestedOutput("UPPER", binary_data=binary)])
        expected = [b"HELLO", b"V2", "É".encode()]  # tritonclient gives JSON BYTES back as str
        assert result.as_numpy("UPPER").tolist() == (expected if binary else [e.decode() for e in expected])


def test_kserve_v1_predict(server: ServerProcess) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert httpx.get(f"{server.inference}/v1/models/lin").json() == {"name": "lin", "ready": True}
    r = httpx.post(f"{server.inference}/v1/models/lin:predict", json={"instances": x.tolist()}, timeout=30)
    assert r.status_code == 200
    np.testing.assert_allclose(np.array(r.json()["predictions"], np.float32), _predictions(server, x), rtol=1e-6)
    r = httpx.post(f"{server.inference}/v1/models/nope:predict", json={"instances": [1]}, timeout=30)
    assert r.status_code == 404 and "nope" in r.json()["error"]
