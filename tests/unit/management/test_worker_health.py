"""Workers that misbehave are seen and replaced (issue 24 item 7), on real worker processes through ModelRegistry.

- A worker stopped with SIGSTOP (busy or idle) sends no heartbeat: it is killed and replaced, the batch it held
  fails with an error naming the missed heartbeats (never waits for response_timeout), the next request is
  answered by the new worker, and describe and ts_worker_restarts_total{reason="unresponsive"} say so.
- A batch that runs longer than the heartbeat bound keeps its worker (the worker beats from a thread).
- A handler that keeps 20 MiB per request, under a small workerMemoryLimit: the worker is restarted after the
  batch that took it over, every request is answered, and /metrics shows the workers' memory.
Every wait polls for the state with a generous bound (the machine may be loaded); no timing is asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from serve.config import load_settings
from serve.errors import WorkerError
from serve.management import ModelRegistry
from serve.management.memory import MemoryLimit
from tests.unit.management.models import CONTROL_HANDLER, model_dir, request, run, running

HEARTBEAT = {"worker_heartbeat_interval": 0.25, "worker_heartbeat_misses": 4}  # hung after 1 s of silence
BOUND = 60.0  # s: the longest any state is waited for; far below response_timeout (120 s)

# keeps 20 MiB per "keep" request for as long as the process lives; answers with its pid
KEEPER = """
import os

KEPT = []


def handle(data, context):
    if data is None:
        return None
    out = []
    for row in data:
        if bytes(row.get("body") or b"") == b"keep":
            KEPT.append(b"k" * (20 << 20))
        out.append({"pid": os.getpid(), "kept": len(KEPT)})
    return out
"""


def _worker(reg: ModelRegistry, name: str = "m") -> dict[str, Any]:
    return reg.describe(name)[0]["workers"][0]


async def _until(what: str, check: Any) -> Any:
    """Poll `check()` until it returns something true, for at most BOUND seconds."""
    deadline = time.monotonic() + BOUND
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what} did not happen within {BOUND} s"
        await asyncio.sleep(0.05)
    return value


def _resume(pid: int) -> None:
    """Let a stopped process go (the server killed it: this only cleans up if it did not)."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _restarts(reg: ModelRegistry, reason: str) -> float:
    page = reg.metrics.render(["ts_worker_restarts_total"])[0].decode()
    found = re.search(rf'ts_worker_restarts_total\{{[^}}]*reason="{reason}",\}} (\S+)', page)
    return float(found.group(1)) if found else 0.0


def test_a_stopped_worker_fails_its_batch_and_is_replaced(tmp_path: Path) -> None:
    root = model_dir(tmp_path, "m", CONTROL_HANDLER)

    async def scenario() -> None:
        async with running(tmp_path, **HEARTBEAT) as reg:
            await reg.register(root.name, initial_workers=1)
            first = _worker(reg)["pid"]
            held = asyncio.create_task(reg.submit("m", None, request("sleep:100")))
            await _until("the batch reaching the worker", lambda: (root / "batches.txt").exists() or held.done())
            assert not held.done(), held.result()  # (the result, or its error, says why it ended early)
            try:
                os.kill(first, signal.SIGSTOP)
                with pytest.raises(WorkerError, match="sent no heartbeat") as e:
                    await held  # answered once the heartbeat is missed, long before response_timeout (120 s)
                assert f"pid {first}" in str(e.value) and "worker_heartbeat_misses" in str(e.value)
            finally:
                _resume(first)
            answer = await reg.submit("m", None, request("ok"))  # queued until the new worker is ready
            assert answer.status == 200 and b'"pid": %d' % first not in answer.body
            worker = _worker(reg)
            assert worker["status"] == "READY" and worker["pid"] != first and "no heartbeat" in worker["lastError"]

            second = worker["pid"]  # idle this time: nothing in flight
            try:
                os.kill(second, signal.SIGSTOP)

                def replaced() -> bool:
                    worker = _worker(reg)
                    return worker["pid"] not in (first, second) and worker["status"] == "READY"

                await _until("the idle stopped worker's replacement", replaced)
            finally:
                _resume(second)
            assert (await reg.submit("m", None, request("ok"))).status == 200
            assert _restarts(reg, "unresponsive") == 2.0
            assert reg.health()[0]

    run(scenario(), timeout=4 * BOUND)


def test_a_batch_longer_than_the_heartbeat_bound_keeps_its_worker(tmp_path: Path) -> None:
    root = model_dir(tmp_path, "m", CONTROL_HANDLER)

    async def scenario() -> None:
        async with running(tmp_path, **HEARTBEAT) as reg:
            await reg.register(root.name, initial_workers=1)
            pid = _worker(reg)["pid"]
            answer = await reg.submit("m", None, request("sleep:3"))  # 3 s > the 1 s heartbeat bound
            assert answer.status == 200 and b'"pid": %d' % pid in answer.body
            assert _worker(reg)["pid"] == pid and "lastError" not in _worker(reg)
            assert _restarts(reg, "unresponsive") == 0.0

    run(scenario(), timeout=BOUND)


def test_a_worker_over_its_memory_limit_is_restarted_after_answering(tmp_path: Path) -> None:
    probe = model_dir(tmp_path, "probe", KEEPER)

    async def scenario() -> None:
        async with running(tmp_path) as reg:
            await reg.register(probe.name, initial_workers=1)  # what a freshly loaded worker of this handler holds
            loaded = _worker(reg, "probe")["memoryUsage"]
            assert loaded > 0
            limit = loaded + (50 << 20)  # passed after the third request kept its 20 MiB
            root = model_dir(tmp_path, "m", KEEPER, config=f"workerMemoryLimit: {limit}\n")
            await reg.register(root.name, initial_workers=1)
            assert reg.describe("m")[0]["workerMemoryLimit"] == limit
            answers = await asyncio.gather(*(reg.submit("m", None, request("keep")) for _ in range(8)))
            assert [a.status for a in answers] == [200] * 8  # every accepted request answered
            pids = {int(m) for a in answers for m in re.findall(rb'"pid": (\d+)', a.body)}
            assert len(pids) >= 2  # 8 x 20 MiB do not fit under the limit in one process
            assert "over its memory limit" in _worker(reg)["lastError"]
            assert _restarts(reg, "memory") >= 1.0
            page = reg.metrics.render(["ts_worker_memory_bytes"])[0].decode()
            sample = re.search(r'ts_worker_memory_bytes\{model_name="m",model_version="1.0",hostname="[^"]*",'
                               r'worker_id="(\d+)",\} (\S+)', page)  # fmt: skip
            assert sample and sample.group(1) == _worker(reg)["id"] and float(sample.group(2)) > 0

    run(scenario(), timeout=2 * BOUND)


def test_memory_limit_and_heartbeat_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./config.properties
    assert MemoryLimit(0, lambda: 3).bytes() is None  # 0: no limit
    assert MemoryLimit(1 << 30, lambda: 3).bytes() == 1 << 30
    assert MemoryLimit(None, lambda: 4, memory=16 << 30).bytes() == int((16 << 30) * 0.8 / 4)  # the host's share
    assert MemoryLimit(None, lambda: 0, memory=16 << 30).bytes() == int((16 << 30) * 0.8)
    s = load_settings({}, {})
    assert (s.worker_memory_limit, s.worker_heartbeat_interval, s.worker_heartbeat_misses) == (None, 5, 4)
