"""A hung worker is seen and replaced, against a real `serve` process (issue 24 item 7).

The startup model's worker is stopped with SIGSTOP. Before, it stayed READY and `/ping` Healthy for
response_timeout (120 s). Now, with a 1 s heartbeat bound (0.25 s x 4), `/ping` turns 500 (its replacement is held
in loading by a file, so the state can be observed on any machine), describe shows why in `lastError`, /metrics
counts the restart as unresponsive; once the new worker has loaded, `/ping` is 200 again, predictions are answered by
the new process and its memory is on /metrics. Every wait polls with a generous bound.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import httpx

from serve.archive import package
from tests.integration.server import ServerProcess

BOUND = 60.0
# a worker started while the `hold` file exists waits in loading until it is removed
HANDLER = """
import os
import time

HOLD = {hold!r}


def handle(data, context):
    if data is None:
        deadline = time.monotonic() + 120
        while os.path.exists(HOLD) and time.monotonic() < deadline:
            time.sleep(0.02)
        return None
    return [{{"pid": os.getpid()}} for _ in data]
"""


def _until(what: str, check: Any) -> Any:
    deadline = time.monotonic() + BOUND
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what} did not happen within {BOUND} s"
        time.sleep(0.05)
    return value


def _ping(server: ServerProcess) -> int:
    return httpx.get(server.inference + "/ping", timeout=BOUND).status_code


def _worker(server: ServerProcess) -> dict[str, Any]:
    return httpx.get(server.management + "/models/stall", timeout=BOUND).json()[0]["workers"][0]


def test_a_stopped_worker_turns_ping_unhealthy_and_is_replaced(tmp_path: Path) -> None:
    store, hold = tmp_path / "store", tmp_path / "hold"
    store.mkdir()
    handler = tmp_path / "stall_handler.py"
    handler.write_text(HANDLER.format(hold=str(hold)))
    (tmp_path / "stall.yaml").write_text("minWorkers: 1\nmaxWorkers: 1\n")
    package("stall", "1.0", f"{handler}:handle", config_file=tmp_path / "stall.yaml", export_path=store,
            progress=False)  # fmt: skip
    flags = ("--ncs", "--disable-token-auth", "--models", "stall=stall.mar")
    server = ServerProcess(tmp_path / "run", store, *flags, worker_heartbeat_interval=0.25,
                           worker_heartbeat_misses=4).start()  # fmt: skip
    first = -1
    try:
        first = _worker(server)["pid"]
        assert httpx.post(server.inference + "/predictions/stall", content=b"x", timeout=BOUND).json() == {"pid": first}
        hold.touch()
        os.kill(first, signal.SIGSTOP)
        _until("/ping turning unhealthy", lambda: _ping(server) == 500)
        worker = _worker(server)
        assert worker["status"] in ("RESTARTING", "STARTING")
        assert "sent no heartbeat" in worker["lastError"] and f"pid {first}" in worker["lastError"]
        page = httpx.get(server.metrics + "/metrics", timeout=BOUND).text
        assert re.search(r'ts_worker_restarts_total\{model_name="stall",[^}]*reason="unresponsive",\} 1\.0', page)

        hold.unlink()
        _until("/ping turning healthy again", lambda: _ping(server) == 200)
        second = _worker(server)
        assert second["status"] == "READY" and second["pid"] not in (first, -1)
        answer = httpx.post(server.inference + "/predictions/stall", content=b"x", timeout=BOUND)
        assert answer.status_code == 200 and answer.json() == {"pid": second["pid"]}
        page = httpx.get(server.metrics + "/metrics", timeout=BOUND).text
        memory = re.search(rf'ts_worker_memory_bytes\{{model_name="stall",[^}}]*worker_id="{second["id"]}",\}} (\S+)',
                           page)  # fmt: skip
        assert memory and float(memory.group(1)) > 0
    finally:
        hold.unlink(missing_ok=True)
        for sig in (signal.SIGCONT, signal.SIGKILL):  # the server killed it; this only cleans up if it did not
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if first > 0:
                    os.kill(first, sig)
        server.stop()
