"""gRPC against a real `serve` process: a TorchServe-style client generated from our protos (Ping, Predictions,
StreamPredictions, every management call and the documented errors), health and reflection, and the REAL
tritonclient.grpc (in its own process: see grpc_triton_client.py). Answers are compared with REST `/predictions`.

Archives: `lin` (the built-in `tensor` handler over a serve.nn Linear(4, 3), v2 names in its model-config),
`chunks` (a function handler that yields three chunks) and the recorder `echo` (for register/unregister).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
from google.protobuf import empty_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from serve.archive import package
from serve.frontends.grpc.generated import inference_pb2 as ipb
from serve.frontends.grpc.generated import inference_pb2_grpc as ipb_grpc
from serve.frontends.grpc.generated import management_pb2 as mpb
from serve.frontends.grpc.generated import management_pb2_grpc as mpb_grpc
from tests.integration.server import PROBE_SECONDS, UPPER, WAIT_SECONDS, ServerProcess, lin_archive, recorder_archive

TIMEOUT = 30  # seconds per rpc

CHUNKS = """
def handle(data, context):
    if data is None:
        return None

    def stream():
        for part in ("one", "two", "three"):
            yield [part for _ in data]

    return stream()
"""


def _archives(base: Path, store: Path) -> None:
    src = base / "src"
    lin_archive(src, store)
    (src / "chunks.py").write_text(CHUNKS)
    package("chunks", "1.0", f"{src / 'chunks.py'}:handle", export_path=store, progress=False)
    (src / "upper.py").write_text(UPPER)
    package("upper", "1.0", f"{src / 'upper.py'}:handle", export_path=store, progress=False)
    recorder_archive(store, "echo", base / "echo.log")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("grpc")
    store = base / "store"
    store.mkdir()
    _archives(base, store)
    flags = ("--ncs", "--enable-model-api", "--models", "lin=lin.mar,chunks=chunks.mar,upper=upper.mar")
    proc = ServerProcess(base / "run", store, *flags).start()
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while httpx.get(proc.inference + "/ping", timeout=PROBE_SECONDS).status_code != 200:
            assert time.monotonic() < deadline, f"models not ready within {WAIT_SECONDS} s:\n{proc.log()}"
            time.sleep(0.2)
        yield proc
    finally:
        proc.stop()


def _port(server: ServerProcess, kind: str) -> int:
    return server.ports[f"grpc_{kind}"]


def _channel(server: ServerProcess, kind: str) -> grpc.Channel:
    return grpc.insecure_channel(f"127.0.0.1:{_port(server, kind)}")


def _bearer(server: ServerProcess, kind: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {server.key(kind)}")]


@pytest.fixture
def inference(server: ServerProcess) -> Iterator[ipb_grpc.InferenceAPIsServiceStub]:
    with _channel(server, "inference") as channel:
        yield ipb_grpc.InferenceAPIsServiceStub(channel)


@pytest.fixture
def management(server: ServerProcess) -> Iterator[mpb_grpc.ManagementAPIsServiceStub]:
    with _channel(server, "management") as channel:
        yield mpb_grpc.ManagementAPIsServiceStub(channel)


def _rest(server: ServerProcess, model: str, body: bytes) -> httpx.Response:
    headers = {"Authorization": f"Bearer {server.key('inference')}", "Content-Type": "application/json"}
    return httpx.post(f"{server.inference}/predictions/{model}", content=body, headers=headers, timeout=TIMEOUT)


def test_ping_and_predictions_equal_rest(server: ServerProcess, inference: ipb_grpc.InferenceAPIsServiceStub) -> None:
    key = _bearer(server, "inference")
    assert json.loads(inference.Ping(empty_pb2.Empty(), metadata=key, timeout=TIMEOUT).health) == {"status": "Healthy"}
    row = b"[1.0, 2.0, -3.0, 0.5]"
    answer = inference.Predictions(ipb.PredictionsRequest(model_name="lin", input={"data": row}), metadata=key,
                                   timeout=TIMEOUT)  # fmt: skip
    rest = _rest(server, "lin", row)
    assert rest.status_code == 200
    np.testing.assert_allclose(json.loads(answer.prediction), rest.json(), rtol=1e-6)


def test_stream_predictions(server: ServerProcess, inference: ipb_grpc.InferenceAPIsServiceStub) -> None:
    key = _bearer(server, "inference")
    request = ipb.PredictionsRequest(model_name="chunks", input={"data": b"x"})
    assert [m.prediction for m in inference.StreamPredictions(request, metadata=key, timeout=TIMEOUT)] == [
        b"one", b"two", b"three"]  # fmt: skip
    assert _rest(server, "chunks", b"x").content == b"onetwothree"
    one = inference.StreamPredictions(ipb.PredictionsRequest(model_name="lin", input={"data": b"[1, 2, 3, 4]"}),
                                      metadata=key, timeout=TIMEOUT)  # fmt: skip
    assert len(list(one)) == 1


def test_inference_errors(server: ServerProcess, inference: ipb_grpc.InferenceAPIsServiceStub) -> None:
    key = _bearer(server, "inference")
    cases = [
        (ipb.PredictionsRequest(model_name="nope"), key, grpc.StatusCode.NOT_FOUND),
        (ipb.PredictionsRequest(), key, grpc.StatusCode.INVALID_ARGUMENT),
        (ipb.PredictionsRequest(model_name="lin", input={"data": b"not json"}), key, grpc.StatusCode.INVALID_ARGUMENT),
        (ipb.PredictionsRequest(model_name="lin"), _bearer(server, "management"), grpc.StatusCode.UNAUTHENTICATED),
    ]
    for request, metadata, code in cases:
        with pytest.raises(grpc.RpcError) as err:
            inference.Predictions(request, metadata=metadata, timeout=TIMEOUT)
        assert err.value.code() == code, (request, err.value.details())


def test_every_management_call(server: ServerProcess, management: mpb_grpc.ManagementAPIsServiceStub) -> None:
    key = _bearer(server, "management")
    listed = json.loads(management.ListModels(mpb.ListModelsRequest(), metadata=key, timeout=TIMEOUT).msg)
    assert {m["modelName"] for m in listed["models"]} == {"lin", "chunks", "upper"}
    msg = management.RegisterModel(mpb.RegisterModelRequest(url="echo.mar", initial_workers=1, synchronous=True),
                                   metadata=key, timeout=60).msg  # fmt: skip
    assert "echo" in msg
    described = json.loads(management.DescribeModel(mpb.DescribeModelRequest(model_name="echo"), metadata=key,
                                                    timeout=TIMEOUT).msg)  # fmt: skip
    assert described[0]["modelName"] == "echo"
    rest = httpx.get(f"{server.management}/models/echo", headers={"Authorization": key[0][1]}, timeout=TIMEOUT)
    assert described == rest.json()
    msg = management.ScaleWorker(mpb.ScaleWorkerRequest(model_name="echo", min_worker=2, synchronous=True),
                                 metadata=key, timeout=60).msg  # fmt: skip
    assert msg
    msg = management.SetDefault(mpb.SetDefaultRequest(model_name="echo", model_version="1.0"), metadata=key,
                                timeout=TIMEOUT).msg  # fmt: skip
    assert "echo" in msg
    msg = management.UnregisterModel(mpb.UnregisterModelRequest(model_name="echo"), metadata=key, timeout=60).msg
    assert msg == 'Model "echo" unregistered'
    errors = [
        (lambda: management.DescribeModel(mpb.DescribeModelRequest(model_name="echo"), metadata=key, timeout=TIMEOUT),
         grpc.StatusCode.NOT_FOUND),
        (lambda: management.RegisterModel(mpb.RegisterModelRequest(), metadata=key, timeout=TIMEOUT),
         grpc.StatusCode.INVALID_ARGUMENT),
        (lambda: management.ScaleWorker(mpb.ScaleWorkerRequest(model_name="lin", min_worker=3, max_worker=1),
                                        metadata=key, timeout=TIMEOUT), grpc.StatusCode.INVALID_ARGUMENT),
        (lambda: management.SetDefault(mpb.SetDefaultRequest(model_name="lin", model_version="9.9"), metadata=key,
                                       timeout=TIMEOUT), grpc.StatusCode.NOT_FOUND),
        (lambda: management.ListModels(mpb.ListModelsRequest(), timeout=TIMEOUT), grpc.StatusCode.UNAUTHENTICATED),
    ]  # fmt: skip
    for call, code in errors:
        with pytest.raises(grpc.RpcError) as err:
            call()
        assert err.value.code() == code, err.value.details()


def test_health_and_reflection_need_no_key(server: ServerProcess) -> None:
    for kind, service in (("inference", "org.pytorch.serve.grpc.inference.InferenceAPIsService"),
                          ("management", "org.pytorch.serve.grpc.management.ManagementAPIsService")):  # fmt: skip
        with _channel(server, kind) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT)
            assert check.status == health_pb2.HealthCheckResponse.SERVING
            assert {service, "grpc.health.v1.Health"} <= _services(channel)
    with _channel(server, "inference") as channel:
        assert "inference.GRPCInferenceService" in _services(channel)


def _services(channel: grpc.Channel) -> set[str]:
    """grpcurl's `list`: the services that server reflection names."""
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    (answer,) = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(iter([request]), timeout=TIMEOUT)
    return {s.name for s in answer.list_services_response.service}


def test_tritonclient_grpc_full_flow_equals_rest(server: ServerProcess) -> None:
    x = [[1.0, 2.0, -3.0, 0.5], [0.0, 1.0, 4.0, -2.0]]
    url = f"127.0.0.1:{_port(server, 'inference')}"
    done = subprocess.run([sys.executable, "-m", "tests.integration.grpc_triton_client", url, "lin", json.dumps(x),
                           server.key("inference")], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    assert got["live"] and got["ready"] and got["model_ready"]
    assert got["metadata"]["name"] == "lin"
    assert [(t["name"], t["datatype"], t["shape"]) for t in got["metadata"]["inputs"]] == [("INPUT0", "FP32",
                                                                                            ["-1", "4"])]  # fmt: skip
    assert int(got["config"]["max_batch_size"]) >= 1
    assert got["id"] == "grpc-1"
    rest = [_rest(server, "lin", json.dumps(row).encode()).json() for row in x]
    # float32 rounding only: two rows in one matmul may round differently from one row at a time (1 ulp)
    np.testing.assert_allclose(got["output"], rest, rtol=1e-5, atol=1e-6)
    rounded = [_rest(server, "lin", json.dumps([round(v) for v in row]).encode()).json() for row in x]
    np.testing.assert_allclose(got["int64_output"], rounded, rtol=1e-5, atol=1e-6)
    assert got["upper"] == ["HELLO", "V2", "É"]
    assert got["errors"] == {"unknown_model": "StatusCode.NOT_FOUND", "bad_shape": "StatusCode.INVALID_ARGUMENT"}
