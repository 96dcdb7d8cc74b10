"""Worker caps against a real `serve` process started with tiny caps (max_workers_per_model=2, max_workers=3):
over a cap, REST scale and register are 400 with TorchServe's error body, gRPC ScaleWorker is INVALID_ARGUMENT,
nothing is forked for them, and the server stays healthy and keeps answering predictions. At most two worker
processes run at any time.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import httpx
import pytest

from serve.archive import package
from serve.frontends.grpc.generated import management_pb2 as mpb
from serve.frontends.grpc.generated import management_pb2_grpc as mpb_grpc
from tests.integration.server import ServerProcess, recorder_archive

TIMEOUT = 30


def _echo(server: ServerProcess, text: str) -> httpx.Response:
    return httpx.post(server.inference + "/predictions/echo", content=text, headers={"Content-Type": "text/plain"},
                      timeout=TIMEOUT)  # fmt: skip


def _workers(server: ServerProcess, name: str) -> int:
    return len(httpx.get(f"{server.management}/models/{name}", timeout=TIMEOUT).json()[0]["workers"])


def _bad_request(response: httpx.Response, *parts: str) -> None:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == 400 and body["type"] == "BadRequestException"
    for part in parts:
        assert part in body["message"], body["message"]


def test_worker_caps_refuse_before_forking_and_the_server_stays_healthy(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    recorder_archive(store, "echo", tmp_path / "echo.log")
    (tmp_path / "big.yaml").write_text("minWorkers: 3\nmaxWorkers: 3\n")
    handler = tmp_path / "echo_1_0_handler.py"  # written by recorder_archive
    package("big", "1.0", f"{handler}:handle", config_file=tmp_path / "big.yaml", export_path=store, progress=False)
    flags = ("--ncs", "--disable-token-auth", "--enable-model-api", "--models", "echo=echo.mar")
    server = ServerProcess(tmp_path / "run", store, *flags, max_workers_per_model=2, max_workers=3).start()
    try:
        management = server.management
        scale = httpx.put(management + "/models/echo?min_worker=100000", timeout=TIMEOUT)
        _bad_request(scale, "min_worker 100000 exceeds max_workers_per_model 2 (config key max_workers_per_model)",
                     "has 1 worker(s) now")  # fmt: skip
        register = httpx.post(management + "/models?url=echo.mar&model_name=e3&initial_workers=3", timeout=TIMEOUT)
        _bad_request(register, "initial_workers 3 exceeds max_workers_per_model 2", "max_workers_per_model")
        _bad_request(httpx.post(management + "/models?url=big.mar", timeout=TIMEOUT), "minWorkers 3 exceeds")
        negative = httpx.put(management + "/models/echo?min_worker=-1", timeout=TIMEOUT)
        _bad_request(negative, "min_worker")

        ok = httpx.put(management + "/models/echo?min_worker=2&synchronous=true", timeout=TIMEOUT)
        assert ok.status_code == 200, ok.text
        total = httpx.post(management + "/models?url=echo.mar&model_name=e2&initial_workers=2", timeout=TIMEOUT)
        _bad_request(total, "would bring the workers of all models to 4, over max_workers 3 (config key max_workers)")
        assert httpx.get(management + "/models/e2", timeout=TIMEOUT).status_code == 404

        with grpc.insecure_channel(server.grpc_management) as channel:
            stub = mpb_grpc.ManagementAPIsServiceStub(channel)
            for count in (100000, -1):
                with pytest.raises(grpc.RpcError) as e:
                    stub.ScaleWorker(mpb.ScaleWorkerRequest(model_name="echo", min_worker=count), timeout=TIMEOUT)
                assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert "max_workers_per_model 2" in (e.value.details() or "") or count < 0

        assert _workers(server, "echo") == 2
        assert httpx.get(server.inference + "/ping", timeout=TIMEOUT).status_code == 200
        assert _echo(server, "still here").json() == {"echo": "still here"}
    finally:
        assert server.stop() == 0
