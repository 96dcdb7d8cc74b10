"""Triton's own Python client examples (tests/examples/triton_client/, unmodified) against a real `serve` process,
each as its own process: statistics, model repository control, the input format and the classification extension
(issue 28 item 2), and the plain infer examples beside them. Stand-in models: tests/examples/triton_models.py.

Each example exits non-zero when an answer is wrong (they check sums, differences, identities and error
messages themselves); the image examples print their top classes, checked here against numpy on the classifier's
weights. The statistics are checked with tritonclient.http here and through the gRPC examples, which call
get_inference_statistics and print the parsed message.
"""

from __future__ import annotations

import importlib.util
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.examples.triton_models import LABELS, build_store, classifier_reference
from tests.integration.server import WAIT_SECONDS, ServerProcess

triton = pytest.importorskip("tritonclient.http", reason="tritonclient is a test extra")
Image = pytest.importorskip("PIL.Image", reason="pillow makes the test image")

# not "triton": a directory of that name on a subprocess's sys.path shadows the package torch probes for
EXAMPLES = Path(__file__).parent / "triton_client"
MODELS = ["simple", "simple_int8", "simple_string", "simple_identity", "custom_identity_int32", "densenet_onnx",
          "classifier", "image_bytes"]  # fmt: skip
RUN_SECONDS = 240  # one example, on a loaded machine
HTTP = ["simple_http_infer_client", "simple_http_async_infer_client", "simple_http_aio_infer_client",
        "simple_http_string_infer_client"]  # fmt: skip
GRPC = ["simple_grpc_infer_client", "simple_grpc_async_infer_client", "simple_grpc_aio_infer_client",
        "simple_grpc_string_infer_client", "simple_grpc_custom_args_client", "simple_grpc_keepalive_client",
        "grpc_explicit_byte_content_client", "grpc_explicit_int8_content_client", "grpc_explicit_int_content_client",
        "grpc_client"]  # fmt: skip


def _start(base: Path, store: Path, models: list[str], **properties: object) -> ServerProcess:
    listed = ",".join(f"{m}={m}.mar" for m in models)
    flags = ("--ncs", "--disable-token-auth", "--enable-model-api", "--models", listed)
    proc = ServerProcess(base, store, *flags, **properties).start()
    client = triton.InferenceServerClient(proc.inference.removeprefix("http://"), network_timeout=60)
    deadline = time.monotonic() + WAIT_SECONDS
    while not all(client.is_model_ready(m) for m in models):
        assert time.monotonic() < deadline, f"models not ready within {WAIT_SECONDS} s:\n{proc.log()}"
        time.sleep(0.2)
    return proc


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    base = tmp_path_factory.mktemp("triton")
    store = base / "store"
    build_store(store, base / "src")
    image = base / "image.png"
    Image.fromarray(np.random.default_rng(3).integers(0, 255, (32, 40, 3), dtype=np.uint8)).save(image)
    proc = _start(base / "run", store, MODELS)
    try:
        yield proc, image
    finally:
        proc.stop()


def run_example(name: str, *args: str) -> str:
    """Run tests/examples/triton_client/<name>.py with `args`; its output (it must exit 0)."""
    command = [sys.executable, str(EXAMPLES / f"{name}.py"), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_SECONDS, cwd=EXAMPLES)
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _http(proc: ServerProcess) -> str:
    return proc.inference.removeprefix("http://")


@pytest.mark.parametrize("name", HTTP)
def test_http_examples(served: tuple[ServerProcess, Path], name: str) -> None:
    run_example(name, "-u", _http(served[0]))


@pytest.mark.parametrize("name", GRPC)
def test_grpc_examples(served: tuple[ServerProcess, Path], name: str) -> None:
    out = run_example(name, "-u", served[0].grpc_inference)
    if name in ("simple_grpc_infer_client", "simple_grpc_aio_infer_client"):  # the parsed ModelStatistics
        assert re.search(r'name: "simple"\s+version: "1"', out) and "inference_stats" in out, out[-2000:]


def _top3(image: Path) -> list[tuple[str, str]]:
    scores = classifier_reference(image)
    return [(str(i), LABELS[i]) for i in np.argsort(-scores)[:3]]


def _printed(out: str) -> list[tuple[float, str, str]]:
    """The "    <score> (<index>) = <label>" lines the image examples print."""
    return [(float(s), i, label) for s, i, label in re.findall(r"^\s+(-?[\d.]+) \((\d+)\) = (\w+)$", out, re.M)]


@pytest.mark.parametrize("example", ["grpc_image_client", "image_client grpc", "image_client http",
                                     "ensemble_image_client grpc", "ensemble_image_client http"])  # fmt: skip
def test_image_examples_classify_as_numpy(served: tuple[ServerProcess, Path], example: str) -> None:
    """The classification extension and the input format: the top 3 "score (index) = label" lines equal numpy's
    top 3 of the classifier's scores for the image as the example preprocesses it."""
    proc, image = served
    name, _, protocol = example.partition(" ")
    if example == "image_client http" and importlib.util.find_spec("attrdict") is None:
        pytest.skip("image_client.py over HTTP imports attrdict, which is not installed")
    url = _http(proc) if protocol == "http" else proc.grpc_inference
    model = "image_bytes" if name == "ensemble_image_client" else "classifier"
    flags = ["-i", protocol] if protocol else []
    out = run_example(name, *flags, "-u", url, "-m", model, "-c", "3", str(image))
    printed = _printed(out)
    assert [(i, label) for _, i, label in printed] == _top3(image), out
    reference = np.sort(classifier_reference(image))[::-1][:3]
    np.testing.assert_allclose([s for s, _, _ in printed], reference, rtol=1e-5, atol=1e-5)


def test_statistics_count_what_ran(served: tuple[ServerProcess, Path]) -> None:
    """tritonclient.http parses /stats; inference and execution counts grow by what this test sent, durations are
    consistent (queue and compute within success), and the three routes agree."""
    proc, _ = served
    client = triton.InferenceServerClient(_http(proc), network_timeout=60)
    before = client.get_inference_statistics("custom_identity_int32")["model_stats"][0]
    x = np.arange(16, dtype=np.int32).reshape(1, 16)
    for _ in range(3):
        tensor = triton.InferInput("INPUT0", [1, 16], "INT32")
        tensor.set_data_from_numpy(x)
        assert np.array_equal(client.infer("custom_identity_int32", [tensor]).as_numpy("OUTPUT0"), x)
    after = client.get_inference_statistics("custom_identity_int32", "1")["model_stats"][0]
    assert after["name"] == "custom_identity_int32" and after["version"] == "1"
    assert after["inference_count"] - before["inference_count"] == 3
    assert after["execution_count"] - before["execution_count"] == 3  # batch size 1: one execution each
    stats = after["inference_stats"]
    assert stats["success"]["count"] - before["inference_stats"]["success"]["count"] == 3
    assert stats["fail"]["count"] == 0 and stats["cache_hit"] == {"count": 0, "ns": 0}
    assert stats["queue"]["count"] == stats["compute_infer"]["count"] == stats["success"]["count"]
    assert 0 < stats["compute_infer"]["ns"] + stats["compute_input"]["ns"] <= stats["success"]["ns"]
    assert [b["batch_size"] for b in after["batch_stats"]] == [1]
    assert after["last_inference"] >= int(time.time() * 1000) - 600_000
    every = client.get_inference_statistics()["model_stats"]
    assert sorted(s["name"] for s in every) == sorted(MODELS)
    r = httpx.get(f"{proc.inference}/v2/models/nope/stats", timeout=30)
    assert r.status_code == 404 and "nope" in r.json()["error"]
    r = httpx.get(f"{proc.inference}/v2/models/simple_int8/versions/9/stats", timeout=30)
    assert r.status_code == 404


def test_model_config_declares_format_and_labels(served: tuple[ServerProcess, Path]) -> None:
    client = triton.InferenceServerClient(_http(served[0]), network_timeout=60)
    config = client.get_model_config("classifier")
    assert config["max_batch_size"] == 4
    assert config["input"] == [{"name": "INPUT", "data_type": "TYPE_FP32", "dims": [3, 8, 8], "format": "FORMAT_NCHW"}]
    assert config["output"] == [{"name": "SCORES", "data_type": "TYPE_FP32", "dims": [5],
                                 "label_filename": "labels.txt"}]  # fmt: skip
    tensor = triton.InferInput("INPUT0", [1, 16], "INT32")
    tensor.set_data_from_numpy(np.zeros((1, 16), dtype=np.int32))
    tensor2 = triton.InferInput("INPUT1", [1, 16], "INT32")
    tensor2.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    result = client.infer("simple", [tensor, tensor2], outputs=[triton.InferRequestedOutput("OUTPUT0", class_count=2)])
    assert result.as_numpy("OUTPUT0").tolist() == [[b"15.000000:15", b"14.000000:14"]]  # no label file: index only


def _swap_out(store: Path, name: str) -> Path:
    return (store / f"{name}.mar").rename(store.parent / f"{name}.mar.aside")


def test_model_control_examples(served: tuple[ServerProcess, Path]) -> None:
    """simple_grpc_model_control.py expects 8 models in the repository, simple_http_model_control.py 7: the store
    holds 8; image_bytes is unloaded and moved out for the HTTP one. Both end with `simple` unloaded: it is loaded
    back through the REST route for the tests after."""
    proc, _ = served
    store = proc.store
    try:
        assert "PASS: model control" in run_example("simple_grpc_model_control", "-u", proc.grpc_inference)
        r = httpx.post(f"{proc.inference}/v2/repository/models/image_bytes/unload", timeout=60)
        assert r.status_code == 200, r.text
        aside = _swap_out(store, "image_bytes")
        try:
            assert "PASS: model control" in run_example("simple_http_model_control", "-u", _http(proc))
        finally:
            aside.rename(store / "image_bytes.mar")
        index = httpx.post(f"{proc.inference}/v2/repository/index", timeout=60).json()
        assert {"name": "simple", "version": "", "state": "UNAVAILABLE", "reason": "unloaded"} in index
    finally:
        for name in ("simple", "image_bytes"):
            r = httpx.post(f"{proc.inference}/v2/repository/models/{name}/load", timeout=WAIT_SECONDS)
            assert r.status_code == 200, r.text
    client = triton.InferenceServerClient(_http(proc), network_timeout=60)
    assert client.is_model_ready("simple") and client.get_model_config("simple")["max_batch_size"] == 8


def test_model_control_errors(served: tuple[ServerProcess, Path]) -> None:
    proc, _ = served
    url = f"{proc.inference}/v2/repository/models"
    r = httpx.post(f"{url}/nope/load", timeout=60)
    assert r.status_code == 404 and r.json()["error"].startswith("failed to load 'nope'")
    r = httpx.post(f"{url}/simple/load", json={"parameters": {"config": '{"max_batch_size": "x"}'}}, timeout=60)
    assert r.status_code == 400 and "max_batch_size" in r.json()["error"]
    r = httpx.post(f"{url}/simple/load", json={"parameters": {"config": '{"instance_group": []}'}}, timeout=60)
    assert r.status_code == 400 and "instance_group" in r.json()["error"]
    r = httpx.post(f"{url}/simple/load", json={"parameters": {"file:1/model.py": "eA=="}}, timeout=60)
    assert r.status_code == 400 and "file:1/model.py" in r.json()["error"]
    r = httpx.post(f"{url}/nope/unload", timeout=60)
    assert r.status_code == 404 and r.json()["error"].startswith("failed to unload 'nope'")
    r = httpx.post(f"{url}/simple/load", content=b"{", timeout=60)
    assert r.status_code == 400


def _free(*ports: int) -> bool:
    for port in ports:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return False
    return True


def test_memory_growth_example_on_default_ports(tmp_path: Path) -> None:
    """memory_growth_test.py can only reach localhost:8000 and 8001 (no URL flag): a server of its own there."""
    if not _free(8000, 8001):
        pytest.skip("ports 8000/8001 are taken: memory_growth_test.py cannot be pointed elsewhere")
    store = tmp_path / "store"
    build_store(store, tmp_path / "src")
    proc = _start(tmp_path / "run", store, ["custom_identity_int32"], inference_address="http://127.0.0.1:8000",
                  grpc_inference_port=8001)  # fmt: skip
    try:
        for protocol in ("http", "grpc"):
            run_example("memory_growth_test", "-i", protocol, "-r", "20")
    finally:
        proc.stop()
