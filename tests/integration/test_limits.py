"""Worker caps against a real `serve` process started with tiny caps (max_workers_per_model=2, max_workers=3):
over a cap, REST scale and register are 400 with TorchServe's error body, gRPC ScaleWorker is INVALID_ARGUMENT,
nothing is forked for them, and the server stays healthy and keeps answering predictions. At most two worker
processes run at any time.

Registrations that are no model (issue 17 item 4): the store itself, a handler that is neither built in nor in the
archive, and the extraction budget shared by every registered archive (max_extracted_bytes_total).
"""

from __future__ import annotations

from pathlib import Path

import grpc
import httpx
import pytest

from serve.archive import open_archive, package
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


def test_registrations_that_are_no_model_are_400_and_archives_share_an_extraction_budget(tmp_path: Path) -> None:
    """`url=.`, the store's own path (plain and file://) and a handler that is neither a built-in nor a file of the
    archive are 400 before anything is forked (were 500 from every worker's failed load); archives of all
    registered models unpack to at most max_extracted_bytes_total (here room for two echo.mar): the third is 507
    naming the key until another is unregistered. Echo predictions keep being answered meanwhile."""
    store = tmp_path / "store"
    store.mkdir()
    archive = recorder_archive(store, "echo", tmp_path / "echo.log")
    with open_archive(archive) as opened:
        one = sum(p.stat().st_size for p in opened.model_dir.rglob("*") if p.is_file())
    flags = ("--ncs", "--disable-token-auth", "--enable-model-api", "--models", "echo=echo.mar")
    server = ServerProcess(tmp_path / "run", store, *flags, max_extracted_bytes_total=int(one * 2.5)).start()
    try:
        management = server.management + "/models"
        for url in (".", str(store), f"file://{store}", f"{store}/"):
            answer = httpx.post(management, params={"url": url}, timeout=TIMEOUT)
            _bad_request(answer, "is the model store itself")
        for handler in ("os:system", "subprocess", "/etc/passwd"):
            params = {"url": "echo.mar", "model_name": "e2", "handler": handler, "initial_workers": 1}
            answer = httpx.post(management, params=params, timeout=TIMEOUT)
            why = "it must name a file inside" if "/" in handler else "neither a built-in"
            _bad_request(answer, "Invalid handler", why)
        with grpc.insecure_channel(server.grpc_management) as channel:
            stub = mpb_grpc.ManagementAPIsServiceStub(channel)
            with pytest.raises(grpc.RpcError) as e:
                request = mpb.RegisterModelRequest(url="echo.mar", model_name="e2", handler="os:system")
                stub.RegisterModel(request, timeout=TIMEOUT)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "Invalid handler" in (e.value.details() or "")
        assert _echo(server, "still here").json() == {"echo": "still here"}

        second = httpx.post(management, params={"url": "echo.mar", "model_name": "e2"}, timeout=TIMEOUT)
        assert second.status_code == 200, second.text
        over = httpx.post(management, params={"url": "echo.mar", "model_name": "e3"}, timeout=TIMEOUT)
        assert over.status_code == 507, over.text
        assert "max_extracted_bytes_total" in over.json()["message"]
        assert httpx.get(f"{management}/e3", timeout=TIMEOUT).status_code == 404
        assert httpx.delete(f"{management}/echo", timeout=TIMEOUT).status_code == 200
        again = httpx.post(management, params={"url": "echo.mar", "model_name": "e3"}, timeout=TIMEOUT)
        assert again.status_code == 200, again.text
        assert httpx.get(server.inference + "/ping", timeout=TIMEOUT).status_code == 200
    finally:
        assert server.stop() == 0
