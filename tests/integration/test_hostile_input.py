"""Hostile request bodies against a real `serve` process (issue 17 items 2 and 7): one request's bad input fails
only that request, on every JSON entry point, and every JSON answer is standard JSON.

- A batch of 8 where two requests are hostile (JSON nested 100,000 deep, a 5000-digit integer): those two are 400,
  the six valid ones 200 with their own answers, all from the same handler call.
- `/v2/models/{m}/infer`, KServe `/v1` and a register body with the same bodies: 400; gRPC `Predictions`:
  INVALID_ARGUMENT.
- The tensor handler: a shape contradicting the model-config's, or a .npy header claiming more than its bytes: 400.
- A handler that raises a plain exception: TorchServe's 503 "Prediction failed" with the exception's text.
- A handler answering NaN and Infinity: `null` in the body, which a strict parser accepts.
- Model names (item 3): over 256 characters or outside [A-Za-z0-9_.-] is 400 / INVALID_ARGUMENT on REST and gRPC
  register; no 404 or gRPC status echoes more than a bounded, escaped form of a name it was sent.
- Bytes that are not HTTP/2 (random, an HTTP/1.1 request, a preface then garbage frames, a rapid-reset flood) on the
  gRPC port: each ends its own connection, and gRPC and REST go on answering.
The server answers /ping and valid requests throughout.
"""

from __future__ import annotations

import io
import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
from google.protobuf import empty_pb2

from serve.archive import package
from serve.frontends.grpc.generated import inference_pb2 as ipb
from serve.frontends.grpc.generated import inference_pb2_grpc as ipb_grpc
from serve.frontends.grpc.generated import management_pb2 as mpb
from serve.frontends.grpc.generated import management_pb2_grpc as mpb_grpc
from tests.integration.server import ServerProcess, lin_archive

TIMEOUT = 30
BATCH = 8
DEEP = b"[" * 100_000 + b"]" * 100_000
HUGE_INT = b"9" * 5000

# Echoes each request's parsed JSON and logs each batch's size; {"sleep": s} sleeps, {"raise": text} raises a plain
# exception, {"nan": true} answers NaN and Infinity.
HANDLER = """
import time

LOG = {log!r}


def handle(data, context):
    if data is None:
        return None
    with open(LOG, "a") as f:
        f.write(f"{{len(data)}}\\n")
    out = []
    for row in data:
        body = row.get("body")
        if isinstance(body, dict) and "sleep" in body:
            time.sleep(body["sleep"])
        if isinstance(body, dict) and "raise" in body:
            raise RuntimeError(body["raise"])
        if isinstance(body, dict) and body.get("nan"):
            out.append({{"values": [float("nan"), float("inf"), -float("inf"), 1.5]}})
            continue
        out.append({{"echo": body}})
    return out
"""


def _strict(text: str) -> Any:
    """json.loads that refuses NaN and Infinity, as strict parsers (JavaScript's, Go's) do."""

    def refuse(name: str) -> Any:
        raise ValueError(f"not standard JSON: {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    base = tmp_path_factory.mktemp("hostile")
    store = base / "store"
    store.mkdir()
    handler = base / "echo_json.py"
    handler.write_text(HANDLER.format(log=str(base / "batches.log")))
    package("echo", "1.0", f"{handler}:handle", export_path=store, progress=False)
    lin_archive(base / "lin", store)
    flags = ("--ncs", "--disable-token-auth", "--enable-model-api", "--models", "lin=lin.mar")
    proc = ServerProcess(base / "run", store, *flags).start()
    register = f"url=echo.mar&batch_size={BATCH}&max_batch_delay=2000&initial_workers=1&synchronous=true"
    assert httpx.post(f"{proc.management}/models?{register}", timeout=60).status_code == 200
    proc.batches = base / "batches.log"  # type: ignore[attr-defined]
    yield proc
    proc.stop()


def _post(server: ServerProcess, path: str, body: bytes) -> httpx.Response:
    return httpx.post(server.inference + path, content=body, headers={"Content-Type": "application/json"},
                      timeout=TIMEOUT)  # fmt: skip


def _healthy(server: ServerProcess) -> None:
    assert httpx.get(server.inference + "/ping", timeout=TIMEOUT).json()["status"] == "Healthy"
    answer = _post(server, "/v2/models/lin/infer", json.dumps(_v2([[1, 2, 3, 4]])).encode())
    assert answer.status_code == 200, answer.text


def _v2(data: Any, shape: list[int] | None = None) -> dict[str, Any]:
    return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": shape or [1, 4], "data": data}]}


def test_hostile_requests_fail_alone_and_their_batch_mates_are_served(server: ServerProcess) -> None:
    log: Path = server.batches  # type: ignore[attr-defined]
    before = len(log.read_text().split()) if log.exists() else 0
    bodies = [DEEP, HUGE_INT] + [json.dumps({"n": i}).encode() for i in range(BATCH - 2)]
    with ThreadPoolExecutor(BATCH + 1) as pool:  # the worker sleeps while all 8 queue up: they are one batch
        busy = pool.submit(_post, server, "/predictions/echo", b'{"sleep": 1.5}')
        time.sleep(0.5)
        answers = list(pool.map(lambda b: _post(server, "/predictions/echo", b), bodies))
        assert busy.result().status_code == 200
    for hostile in answers[:2]:
        assert hostile.status_code == 400, hostile.text
        assert hostile.json()["code"] == 400 and hostile.json()["message"]
    assert "nested too deeply" in answers[0].json()["message"]
    assert "4300 digits" in answers[1].json()["message"]
    for i, answer in enumerate(answers[2:]):
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"echo": {"n": i}}
    assert log.read_text().split()[before:] == ["1", str(BATCH - 2)]  # the sleeper, then one call for the 6
    _healthy(server)


@pytest.mark.parametrize("body", [DEEP, b'{"inputs": ' + DEEP + b"}", HUGE_INT, b'{"inputs": [' + HUGE_INT + b"]}"])
def test_v2_and_v1_bodies_python_cannot_hold_are_400(server: ServerProcess, body: bytes) -> None:
    v2 = _post(server, "/v2/models/lin/infer", body)
    assert v2.status_code == 400, v2.text
    assert "not JSON" in v2.json()["error"]
    v1 = _post(server, "/v1/models/lin:predict", body)
    assert v1.status_code == 400, v1.text
    assert "not JSON" in v1.json()["error"]
    _healthy(server)


@pytest.mark.parametrize("data", [DEEP, HUGE_INT])
def test_grpc_predictions_with_a_hostile_body_is_invalid_argument(server: ServerProcess, data: bytes) -> None:
    with grpc.insecure_channel(server.grpc_inference) as channel:
        stub = ipb_grpc.InferenceAPIsServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.Predictions(ipb.PredictionsRequest(model_name="lin", input={"data": data}), timeout=TIMEOUT)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
        ok = stub.Predictions(ipb.PredictionsRequest(model_name="lin", input={"data": b"[1, 2, 3, 4]"}),
                              timeout=TIMEOUT)  # fmt: skip
        assert len(json.loads(ok.prediction)) == 3
    _healthy(server)


def test_a_handler_exception_is_503_prediction_failed_with_its_text(server: ServerProcess) -> None:
    answer = _post(server, "/predictions/echo", b'{"raise": "the model cannot take this"}')
    assert answer.status_code == 503, answer.text
    body = answer.json()
    assert body["code"] == 503 and body["message"].startswith("Prediction failed")
    assert "RuntimeError: the model cannot take this" in body["message"]
    _healthy(server)


def test_nan_and_infinity_answer_as_null(server: ServerProcess) -> None:
    answer = _post(server, "/predictions/echo", b'{"nan": true}')
    assert answer.status_code == 200, answer.text
    assert _strict(answer.text) == {"values": [None, None, None, 1.5]}


def test_tensor_inputs_that_contradict_the_model_are_400(server: ServerProcess) -> None:
    wrong = _post(server, "/v2/models/lin/infer", json.dumps(_v2([[1, 2, 3, 4, 5]], [1, 5])).encode())
    assert wrong.status_code == 400, wrong.text
    assert "contradicts the model-config's declared input shape [-1, 4]" in wrong.json()["error"]
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**12, 4)})
    claims = httpx.post(server.inference + "/predictions/lin", content=header.getvalue() + b"\0" * 16,
                        headers={"Content-Type": "application/octet-stream"}, timeout=TIMEOUT)  # fmt: skip
    assert claims.status_code == 400, claims.text
    assert "header claims shape (1000000000000, 4)" in claims.json()["message"]
    _healthy(server)


@pytest.mark.parametrize("body", [DEEP, b'{"url": "echo.mar", "initial_workers": ' + HUGE_INT + b"}"])
def test_a_register_body_python_cannot_hold_is_400(server: ServerProcess, body: bytes) -> None:
    answer = httpx.post(server.management + "/models", content=body, headers={"Content-Type": "application/json"},
                        timeout=TIMEOUT)  # fmt: skip
    assert answer.status_code == 400, answer.text
    assert answer.json()["message"].startswith("the request body is not valid JSON")
    _healthy(server)


LONG_NAME = "m" * 257
ESCAPE_NAME = "evil\x1b[31m\nname"
HUGE_PATH_NAME = "x" * 10_000


@pytest.mark.parametrize(("name", "says"), [(LONG_NAME, "longer than 256 characters (257)"),
                                            (ESCAPE_NAME, "contains special characters")])  # fmt: skip
def test_a_model_name_outside_the_rule_is_refused_and_echoed_bounded(server: ServerProcess, name: str,
                                                                     says: str) -> None:  # fmt: skip
    answer = httpx.post(server.management + "/models", params={"url": "echo.mar", "model_name": name},
                        timeout=TIMEOUT)  # fmt: skip
    assert answer.status_code == 400, answer.text
    message = answer.json()["message"]
    assert says in message and "at most 256 characters" in message
    assert len(message) < 400 and "\x1b" not in message and name not in message
    assert httpx.post(server.management + "/models", params={"url": "echo.mar", "model_name": "m" * 256,
                      "initial_workers": 0}, timeout=TIMEOUT).status_code == 200  # fmt: skip
    assert httpx.delete(server.management + "/models/" + "m" * 256, timeout=TIMEOUT).status_code == 200
    _healthy(server)


def test_a_404_never_echoes_more_than_a_bounded_escaped_name(server: ServerProcess) -> None:
    for url in (f"{server.management}/models/{HUGE_PATH_NAME}", f"{server.inference}/predictions/{HUGE_PATH_NAME}",
                f"{server.management}/models/evil%1B%5B31m"):  # fmt: skip
        answer = httpx.get(url, timeout=TIMEOUT) if "/models/" in url else httpx.post(url, timeout=TIMEOUT)
        assert answer.status_code == 404, answer.text
        message = answer.json()["message"]
        assert message.startswith("Model not found: ") and len(message) < 200 and "\x1b" not in message
    with grpc.insecure_channel(server.grpc_inference) as channel:
        with pytest.raises(grpc.RpcError) as info:
            ipb_grpc.InferenceAPIsServiceStub(channel).Predictions(
                ipb.PredictionsRequest(model_name=HUGE_PATH_NAME, input={"data": b"1"}), timeout=TIMEOUT
            )
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert len(info.value.details() or "") < 200 and "(10000 characters)" in (info.value.details() or "")


@pytest.mark.parametrize("name", [LONG_NAME, ESCAPE_NAME])
def test_grpc_register_and_describe_refuse_a_bad_name_bounded(server: ServerProcess, name: str) -> None:
    with grpc.insecure_channel(server.grpc_management) as channel:
        stub = mpb_grpc.ManagementAPIsServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.RegisterModel(mpb.RegisterModelRequest(url="echo.mar", model_name=name), timeout=TIMEOUT)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = info.value.details() or ""
        assert "at most 256 characters" in details and len(details) < 400 and "\x1b" not in details
        with pytest.raises(grpc.RpcError) as info:
            stub.DescribeModel(mpb.DescribeModelRequest(model_name=HUGE_PATH_NAME), timeout=TIMEOUT)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert len(info.value.details() or "") < 200


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
RESET_FLOOD = PREFACE + b"".join(
    len(b"\x83\x87").to_bytes(3, "big")
    + b"\x01\x04"
    + s.to_bytes(4, "big")
    + b"\x83\x87"  # HEADERS :method POST, :scheme http
    + b"\x00\x00\x04\x03\x00"
    + s.to_bytes(4, "big")
    + b"\x00\x00\x00\x08"  # RST_STREAM CANCEL
    for s in range(1, 2001, 2)
)


@pytest.mark.parametrize("garbage", [
    bytes(range(256)) * 40,
    b"POST /predictions/lin HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n1,2",
    PREFACE + b"\x00\xff\xff\x00\x00\x00\x00\x00\x01" + b"x" * 1000,  # a frame claiming 65535 bytes
    PREFACE + b"\x00\x00\x05\x01\x05\x00\x00\x00\x01\xff\xff\xff\xff\xff",  # HEADERS with a bad HPACK integer
    RESET_FLOOD,
], ids=["random", "http1", "frame-too-large", "bad-hpack", "rapid-reset"])  # fmt: skip
def test_garbage_on_the_grpc_port_ends_only_its_connection(server: ServerProcess, garbage: bytes) -> None:
    host, port = server.grpc_inference.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
        sock.sendall(garbage)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):  # the server closes the connection (GOAWAY first)
            received += chunk
    with grpc.insecure_channel(server.grpc_inference) as channel:
        health = ipb_grpc.InferenceAPIsServiceStub(channel).Ping(empty_pb2.Empty(), timeout=TIMEOUT)
        assert json.loads(health.health)["status"] == "Healthy"
    _healthy(server)
