"""Open Inference Protocol and KServe v1 against a real `serve` process, with the reference client tritonclient.http
(and tritonclient.grpc in its own process, oip_grpc_extras.py).

Archives: `lin` (the built-in `tensor` handler, a serve.nn Linear(4, 3) saved with serve.save, model-config
`handler: {dtype, inputs, outputs}`), `lin4` (the same with `batchSize: 4`, `maxBatchDelay: 7`), `upper` (a
function handler that answers v2 BYTES outputs) and `explainer` (answers EXPLANATION on the explanation path,
PREDICTION otherwise). A second server with token authorization on checks the open health calls and the scheme.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from serve.archive import package
from tests.integration.server import UPPER, WAIT_SECONDS, ServerProcess, lin_archive

EXPLAINER = """
def handle(data, context):
    if data is None:
        return None
    name = "EXPLANATION" if context.get_request_header(0, "explain") == "True" else "PREDICTION"
    out = []
    for row in data:
        spec = row["body"]["inputs"][0]
        out.append({"outputs": [{"name": name, "datatype": "FP32", "shape": spec["shape"],
                                 "data": [2 * v for v in spec["data"]]}]})
    return out
"""
MODELS = "lin=lin.mar,upper=upper.mar,lin4=lin4.mar,explainer=explainer.mar"


def _archives(base: Path, store: Path) -> None:
    src = base / "src"
    lin_archive(src, store)
    (src / "upper.py").write_text(UPPER)
    package("upper", "1.0", f"{src / 'upper.py'}:handle", export_path=store, progress=False)
    (src / "explainer.py").write_text(EXPLAINER)
    package("explainer", "1.0", f"{src / 'explainer.py'}:handle", export_path=store, progress=False)
    config = src / "lin4-config.yaml"
    config.write_text("batchSize: 4\nmaxBatchDelay: 7\n" + (src / "model-config.yaml").read_text())
    package("lin4", "1.0", "tensor", model_file=src / "model.py", serialized_file=src / "lin.pt",
            config_file=config, export_path=store, progress=False)  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("oip")
    store = base / "store"
    store.mkdir()
    _archives(base, store)
    flags = ("--ncs", "--disable-token-auth", "--models", MODELS)
    proc = ServerProcess(base / "run", store, *flags).start()
    try:
        client = triton.InferenceServerClient(_url(proc), network_timeout=30)
        deadline = time.monotonic() + WAIT_SECONDS
        while not all(client.is_model_ready(m.split("=")[0]) for m in MODELS.split(",")):
            assert time.monotonic() < deadline, f"models not ready within {WAIT_SECONDS} s:\n{proc.log()}"
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
    described = httpx.get(f"{server.inference}/v1/models/lin").json()  # KServe v1's fields (and OpenAI's beside)
    assert {k: described[k] for k in ("name", "ready")} == {"name": "lin", "ready": True}
    r = httpx.post(f"{server.inference}/v1/models/lin:predict", json={"instances": x.tolist()}, timeout=30)
    assert r.status_code == 200
    np.testing.assert_allclose(np.array(r.json()["predictions"], np.float32), _predictions(server, x), rtol=1e-6)
    r = httpx.post(f"{server.inference}/v1/models/nope:predict", json={"instances": [1]}, timeout=30)
    assert r.status_code == 404 and "nope" in r.json()["error"]


# ---- issue 19: the routes stock clients call ------------------------------------------------------------------

LIN4_CONFIG = {
    "name": "lin4", "platform": "serve_python", "backend": "python", "max_batch_size": 4,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [3]}],
    "dynamic_batching": {"max_queue_delay_microseconds": 7000},
}  # fmt: skip


def _grpc_extras(server: ServerProcess, model: str, key: str = "") -> dict:
    url = f"127.0.0.1:{server.ports['grpc_inference']}"
    command = [sys.executable, "-m", "tests.integration.oip_grpc_extras", url, model, key]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout))


def test_model_config_over_rest_and_grpc(server: ServerProcess, client: triton.InferenceServerClient) -> None:
    assert client.get_model_config("lin4") == LIN4_CONFIG
    assert client.get_model_config("lin4", "1.0") == LIN4_CONFIG
    lin = client.get_model_config("lin")  # batch size 1: no dynamic batching
    assert lin["max_batch_size"] == 1 and "dynamic_batching" not in lin
    with pytest.raises(InferenceServerException, match="Model not found: nope"):
        client.get_model_config("nope")
    got = _grpc_extras(server, "lin4")["config"]  # proto JSON: int64 dims are strings, unset fields left out
    assert got["max_batch_size"] == 4 and got["dynamic_batching"] == {"max_queue_delay_microseconds": "7000"}
    assert [(t["name"], t["data_type"], t["dims"]) for t in got["input"]] == [("INPUT0", "TYPE_FP32", ["4"])]
    assert [(t["name"], t["data_type"], t["dims"]) for t in got["output"]] == [("OUTPUT0", "TYPE_FP32", ["3"])]


def test_repository_index_over_rest_and_grpc(server: ServerProcess, client: triton.InferenceServerClient) -> None:
    names = sorted(m.split("=")[0] for m in MODELS.split(","))
    index = client.get_model_repository_index()
    assert sorted((m["name"], m["version"], m["state"]) for m in index) == [(n, "1.0", "READY") for n in names]
    r = httpx.post(f"{server.inference}/v2/repository/index", json={"ready": True}, timeout=30)
    assert r.status_code == 200 and sorted(m["name"] for m in r.json()) == names
    r = httpx.post(f"{server.inference}/v2/repository/index", json={"ready": "yes"}, timeout=30)
    assert r.status_code == 400 and "ready" in r.json()["error"]
    grpc_index = _grpc_extras(server, "lin")["index"]
    assert sorted((m["name"], m["version"], m["state"]) for m in grpc_index) == [(n, "1.0", "READY") for n in names]


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_compressed_infer_equals_plain(server: ServerProcess, client: triton.InferenceServerClient,
                                       coding: str) -> None:  # fmt: skip
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    tensor = triton.InferInput("INPUT0", [3, 4], "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer("lin", [tensor], request_compression_algorithm=coding,
                          response_compression_algorithm=coding)  # fmt: skip
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), _predictions(server, x), rtol=1e-6, atol=1e-6)
    body = json.dumps(x[0].tolist()).encode()
    packed = gzip.compress(body) if coding == "gzip" else zlib.compress(body)
    headers = {"Content-Type": "application/json", "Content-Encoding": coding, "Accept-Encoding": coding}
    r = httpx.post(f"{server.inference}/predictions/lin", content=packed, headers=headers, timeout=30)
    assert r.status_code == 200 and r.headers["content-encoding"] == coding  # httpx inflates the body itself
    np.testing.assert_allclose(r.json(), _predictions(server, x[:1])[0], rtol=1e-6)


def test_a_decompression_bomb_is_413_and_bad_data_400(server: ServerProcess) -> None:
    bomb = gzip.compress(b"[" + b"0," * 40_000_000 + b"0]")  # 80 MB of JSON, over the 6.5 MB default limit
    assert len(bomb) < 200_000
    for path in ("/predictions/lin", "/v2/models/lin/infer"):
        r = httpx.post(server.inference + path, content=bomb, headers={"Content-Encoding": "gzip"}, timeout=30)
        assert r.status_code == 413 and "max_request_size" in r.text, (path, r.text)
    r = httpx.post(f"{server.inference}/predictions/lin", content=b"[1, 2]", headers={"Content-Encoding": "gzip"},
                   timeout=30)  # fmt: skip
    assert r.status_code == 400 and "not valid gzip" in r.json()["message"]
    r = httpx.post(f"{server.inference}/predictions/lin", content=b"[1, 2]", headers={"Content-Encoding": "br"},
                   timeout=30)  # fmt: skip
    assert r.status_code == 415 and "gzip, deflate" in r.json()["message"]
    assert httpx.get(f"{server.inference}/ping", timeout=30).status_code == 200


def test_v2_explain_takes_the_explanation_path(server: ServerProcess) -> None:
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [2], "data": [1.5, -2.0]}]}
    for path, name in (("explain", "EXPLANATION"), ("infer", "PREDICTION"), ("versions/1.0/explain", "EXPLANATION")):
        r = httpx.post(f"{server.inference}/v2/models/explainer/{path}", json=body, timeout=30)
        assert r.status_code == 200, r.text
        (out,) = r.json()["outputs"]
        assert (out["name"], out["data"]) == (name, [3.0, -4.0])
    r = httpx.post(
        f"{server.inference}/v2/models/lin/explain",
        timeout=30,
        json={"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]},
    )
    assert r.status_code == 501 and "get_insights" in r.json()["error"]  # the tensor handler explains nothing


def test_kserve_v1_liveness_and_put_predictions(server: ServerProcess) -> None:
    r = httpx.get(f"{server.inference}/", timeout=30)
    assert (r.status_code, r.json()) == (200, {"status": "alive"})
    row = b"[1.0, 2.0, -3.0, 0.5]"
    headers = {"Content-Type": "application/json"}
    put = httpx.put(f"{server.inference}/predictions/lin", content=row, headers=headers, timeout=30)  # curl -T
    post = httpx.post(f"{server.inference}/predictions/lin", content=row, headers=headers, timeout=30)
    assert put.status_code == post.status_code == 200
    np.testing.assert_allclose(put.json(), post.json(), rtol=1e-6)
    put = httpx.put(f"{server.inference}/predictions/lin/1.0", content=row, headers=headers, timeout=30)
    np.testing.assert_allclose(put.json(), post.json(), rtol=1e-6)
    assert httpx.delete(f"{server.inference}/predictions/lin", timeout=30).status_code == 405


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with token authorization on, serving `lin`."""
    base = tmp_path_factory.mktemp("oip_auth")
    store = base / "store"
    lin_archive(base / "src", store)
    proc = ServerProcess(base / "run", store, "--ncs", "--models", "lin=lin.mar").start()
    try:
        yield proc
    finally:
        proc.stop()


def test_health_calls_are_open_and_the_scheme_case_insensitive(guarded: ServerProcess) -> None:
    key = guarded.key("inference")
    got = _grpc_extras(guarded, "lin", key)
    assert got["open"] == {"live": True, "ready": True, "name": "serve"}  # no key sent, as REST /v2/health
    assert got["model_ready_without_key"] == "StatusCode.UNAUTHENTICATED"
    assert got["config"]["name"] == "lin" and [m["name"] for m in got["index"]] == ["lin"]
    row = b"[1.0, 2.0, -3.0, 0.5]"
    for scheme in ("Bearer", "bearer", "BEARER"):
        r = httpx.post(f"{guarded.inference}/predictions/lin", content=row, timeout=30,
                       headers={"Authorization": f"{scheme} {key}", "Content-Type": "application/json"})  # fmt: skip
        assert r.status_code == 200, r.text
    r = httpx.post(f"{guarded.inference}/predictions/lin", content=row, timeout=30)
    assert r.status_code == 401


def test_metrics_text_matches_torchserves_regexes(server: ServerProcess) -> None:
    """TorchServe's own test_metrics.py patterns, on the live page after a prediction (each exactly once)."""
    r = httpx.post(f"{server.inference}/predictions/lin", content=b"[1, 2, 3, 4]", timeout=30,
                   headers={"Content-Type": "application/json"})  # fmt: skip
    assert r.status_code == 200
    page = httpx.get(f"{server.metrics}/metrics", timeout=30).text
    labels = r'model_name="lin",model_version="default",hostname=".+",'
    patterns = [
        r"TYPE Requests2XX counter", r'Requests2XX\{Level="Host",Hostname=".+",\} \d+\.\d+',
        r"TYPE ts_inference_requests_total counter", rf"ts_inference_requests_total\{{{labels}\}} \d+\.\d+",
        r"TYPE ts_inference_latency_microseconds counter",
        rf"ts_inference_latency_microseconds\{{{labels}\}} \d+\.\d+",
        r"TYPE ts_queue_latency_microseconds counter", rf"ts_queue_latency_microseconds\{{{labels}\}} \d+\.\d+",
        r"TYPE QueueTime gauge", r'QueueTime\{Level="Host",Hostname=".+",\} \d+\.\d+',
        r"TYPE HandlerTime gauge", r'HandlerTime\{ModelName="lin",Level="Model",Hostname=".+",\} \d+\.\d+',
    ]  # fmt: skip
    for pattern in patterns:
        assert len(re.findall(pattern, page)) == 1, f"{pattern} in\n{page}"
    assert "_created" not in page
