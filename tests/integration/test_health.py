"""Health tells the truth, against a real `serve` process (issue 17 item 6).

A startup model whose handler raises while loading crash-loops: `/ping` stays 500, `/v2/health/ready` 503 and gRPC
health NOT_SERVING for as long as it has no ready worker, and the log does not say "serve is up"; a prediction, and
a synchronous scale that ends with no ready worker, are 503 with the handler's own error (what describe shows), not
"use scale workers API". Once that model is unregistered the server is healthy. Scaling down and unregistering a
healthy model logs no ERROR.
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from serve.archive import package
from tests.integration.server import ServerProcess, recorder_archive

TIMEOUT = 30
BROKEN = """
raise RuntimeError("cannot read the weights: broken on purpose")


def handle(data, context):
    return data
"""


def _broken_archive(tmp_path: Path, store: Path) -> None:
    handler = tmp_path / "broken_handler.py"
    handler.write_text(BROKEN)
    (tmp_path / "broken.yaml").write_text("minWorkers: 1\nmaxWorkers: 1\n")
    package("broken", "1.0", f"{handler}:handle", config_file=tmp_path / "broken.yaml", export_path=store,
            progress=False)  # fmt: skip


def _wait_for_log(server: ServerProcess, text: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while text not in server.log(tail=1 << 20):
        assert time.monotonic() < deadline, f"{text!r} never logged:\n{server.log()}"
        time.sleep(0.1)


def _grpc_health(server: ServerProcess) -> int:
    with grpc.insecure_channel(server.grpc_inference) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT)
    return int(reply.status)


def test_a_crash_looping_startup_model_keeps_the_server_unhealthy(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    recorder_archive(store, "echo", tmp_path / "echo.log")
    _broken_archive(tmp_path, store)
    flags = ("--ncs", "--disable-token-auth", "--enable-model-api", "--models", "echo=echo.mar", "broken=broken.mar")
    server = ServerProcess(tmp_path / "run", store, *flags).start(healthy=False)
    try:
        _wait_for_log(server, "but is not healthy")
        assert "serve is up" not in server.log(tail=1 << 20)
        assert "broken on purpose" in server.log(tail=1 << 20)
        for _ in range(10):  # the worker keeps restarting; the answer never turns Healthy
            ping = httpx.get(server.inference + "/ping", timeout=TIMEOUT)
            assert (ping.status_code, ping.json()) == (500, {"status": "Unhealthy"})
            time.sleep(0.2)
        assert httpx.get(server.inference + "/v2/health/ready", timeout=TIMEOUT).status_code == 503
        assert _grpc_health(server) == health_pb2.HealthCheckResponse.NOT_SERVING

        described = httpx.get(server.management + "/models/broken", timeout=TIMEOUT).json()[0]
        assert "broken on purpose" in described["workers"][0]["lastError"]
        scale = httpx.put(server.management + "/models/broken?min_worker=1&synchronous=true", timeout=TIMEOUT)
        assert scale.status_code == 503, scale.text
        assert "broken on purpose" in scale.json()["message"]
        assert "scale workers API" not in scale.json()["message"]

        started = time.monotonic()
        predict = httpx.post(server.inference + "/predictions/broken", content="hi", timeout=TIMEOUT)
        assert predict.status_code == 503 and time.monotonic() - started < TIMEOUT / 2, predict.text  # not queued
        assert "broken on purpose" in predict.json()["message"]
        echo = httpx.post(server.inference + "/predictions/echo", content="hi", timeout=TIMEOUT)
        assert echo.status_code == 200, echo.text  # the healthy model serves meanwhile

        mark = len(server.log(tail=1 << 20))
        assert httpx.delete(server.management + "/models/broken", timeout=TIMEOUT).status_code == 200
        ping = httpx.get(server.inference + "/ping", timeout=TIMEOUT)
        assert (ping.status_code, ping.json()) == (200, {"status": "Healthy"})
        assert _grpc_health(server) == health_pb2.HealthCheckResponse.SERVING
        assert httpx.get(server.inference + "/v2/health/ready", timeout=TIMEOUT).status_code == 200

        up = httpx.put(server.management + "/models/echo?min_worker=2&synchronous=true", timeout=TIMEOUT)
        assert up.status_code == 200, up.text
        down = httpx.put(server.management + "/models/echo?min_worker=1&synchronous=true", timeout=TIMEOUT)
        assert down.status_code == 200, down.text
        assert httpx.delete(server.management + "/models/echo", timeout=TIMEOUT).status_code == 200
        after = server.log(tail=1 << 20)[mark:]
        assert " ERROR " not in after and "ERROR" not in after, after
    finally:
        server.stop()
