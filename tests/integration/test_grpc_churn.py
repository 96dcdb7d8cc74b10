"""gRPC under worker churn (issue 17 item 8) against a real `serve` process: 200 management calls, each on a
fresh channel (a new HTTP/2 connection), register, scale up and down, describe, list and unregister models
while their worker processes start and stop. Every call succeeds.

Before workers were started without fork() (serve/management/spawn.py), uvloop forked the server for each worker
and gRPC's at-fork handlers ran inside the live server: 1-2 calls in 600 failed with UNAVAILABLE ("Received
unexpected settings ack", "Socket closed") and the log filled with gRPC's "skipping fork() handlers" lines. The
failures are rare, so the log is checked too: gRPC logs those lines only when it sees a fork.
"""

from __future__ import annotations

import json
from pathlib import Path

import grpc

from serve.frontends.grpc.generated import management_pb2 as mpb
from serve.frontends.grpc.generated import management_pb2_grpc as mpb_grpc
from tests.integration.server import ServerProcess, recorder_archive

CALLS = 200
MODELS = 3  # each cycle works on the next model; a model is re-registered two cycles after it was unregistered
TIMEOUT = 60


def _step(stub: mpb_grpc.ManagementAPIsServiceStub, step: int, name: str) -> str:
    """One call of the cycle register, list, scale to 2, describe, list, scale to 1, describe, unregister."""
    if step == 0:
        request = mpb.RegisterModelRequest(url="echo.mar", model_name=name, initial_workers=1, synchronous=False)
        return str(stub.RegisterModel(request, timeout=TIMEOUT).msg)
    if step in (1, 4):
        return str(stub.ListModels(mpb.ListModelsRequest(), timeout=TIMEOUT).msg)
    if step in (2, 5):
        count = 2 if step == 2 else 1
        request = mpb.ScaleWorkerRequest(model_name=name, min_worker=count, max_worker=2, synchronous=False)
        return str(stub.ScaleWorker(request, timeout=TIMEOUT).msg)
    if step in (3, 6):
        return str(stub.DescribeModel(mpb.DescribeModelRequest(model_name=name), timeout=TIMEOUT).msg)
    return str(stub.UnregisterModel(mpb.UnregisterModelRequest(model_name=name), timeout=TIMEOUT).msg)


def test_fresh_channels_never_fail_while_workers_start_and_stop(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    recorder_archive(store, "echo", tmp_path / "echo.log")
    flags = ("--ncs", "--disable-token-auth", "--enable-model-api")
    server = ServerProcess(tmp_path / "run", store, *flags, max_workers_per_model=2, max_workers=2 * MODELS).start()
    failures: list[str] = []
    pids: set[int] = set()
    try:
        for i in range(CALLS):
            step, name = i % 8, f"m{(i // 8) % MODELS}"
            with grpc.insecure_channel(server.grpc_management) as channel:  # a new connection for every call
                try:
                    answer = _step(mpb_grpc.ManagementAPIsServiceStub(channel), step, name)
                except grpc.RpcError as e:
                    failures.append(f"call {i} (step {step} on {name}): {e.code().name} {e.details()}")
                    continue
            if step in (3, 6):
                pids |= {w["pid"] for version in json.loads(answer) for w in version["workers"] if w.get("pid")}
        log = server.log(tail=1 << 30)
    finally:
        assert server.stop() == 0
    assert failures == []
    assert len(pids) >= 10, f"only {len(pids)} worker processes were seen starting: the loop did not churn"
    assert "fork() handlers" not in log and "fork_posix" not in log, "gRPC saw the server fork"
