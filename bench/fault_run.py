"""A bounded fault run (issue 17, "Tests and measurements"): a real `serve` under 32-way load while it is hurt.

    .venv/bin/python bench/fault_run.py            # prints the table
    .venv/bin/python bench/fault_run.py --write    # also replaces the fault-run section of bench/RESULTS.md

Phases, each on a fresh server (port 0 everywhere, reported in its ports file):
1. kill -9 a worker: 32 clients POST to `echo` (2 workers, batches of up to 4, ~20 ms a batch); after 2 s one
   worker process is SIGKILLed; the load goes on until the phase ends.
2. queue overflow: 32 clients against `slow` (1 worker, 0.2 s a request, job_queue_size=4), so most requests find
   the queue full.
3. SIGTERM mid-load: 32 clients against `echo`; after 2 s the server gets SIGTERM and drains; the clients keep
   sending until it has exited.

Every request ends in exactly one bucket: answered (200 with its own echo), errored (an error status, or a
connection refused or reset: the client was told), hung (no answer within the client timeout, 30 s), lost (a 200
carrying another request's answer, or a client still blocked after the phase's end plus the timeout). The promise
is 0 hung and 0 lost. tests/integration/test_fault_run.py runs a shorter version.

Each fault comes once the load is on (a first request answered) and each phase lasts until what it is about has
happened (the queue overflowed); "after" is judged once the server had time to recover (a new worker READY):
on a machine at a load of 10 clients and workers start in seconds, and a fixed schedule measured the machine.
All of these waits are bounded by SETTLE_SECONDS.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from serve.archive import package  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from serve_process import ServeProcess  # noqa: E402

RESULTS = Path(__file__).with_name("RESULTS.md")
CLIENT_TIMEOUT = 30.0
START_SECONDS = 900.0  # a bound for a loaded machine, not a target
SETTLE_SECONDS = 120.0  # for the load to be on, the queue to overflow, a killed worker to be replaced

ECHO = """
import time


def handle(data, context):
    if data is None:
        return None
    time.sleep({delay})
    out = []
    for row in data:
        body = row.get("body") if row.get("body") is not None else row.get("data")
        out.append(body.decode() if isinstance(body, (bytes, bytearray)) else str(body))
    return out
"""


@dataclass
class Tally:
    """What became of every request of one phase."""

    sent: int = 0
    answered: int = 0
    errored: Counter[str] = field(default_factory=Counter)
    hung: int = 0
    lost: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, bucket: str, detail: str = "") -> None:
        with self.lock:
            if bucket == "answered":
                self.answered += 1
            elif bucket == "errored":
                self.errored[detail] += 1
            elif bucket == "hung":
                self.hung += 1
            else:
                self.lost += 1


class Server(ServeProcess):
    """serve_process.ServeProcess, and the pids of a model's workers."""

    def __init__(self, workdir: Path, store: Path, models: str, **properties: object) -> None:
        super().__init__(workdir, store, models, start_seconds=START_SECONDS, **properties)

    def worker_pids(self, model: str) -> list[int]:
        status, body = request("GET", self.ports["management"], f"/models/{model}")
        return [w["pid"] for w in json.loads(body)[0]["workers"] if w.get("pid", -1) > 0] if status == 200 else []


def request(method: str, port: int, path: str, body: bytes | None = None,
            timeout: float = CLIENT_TIMEOUT) -> tuple[int, bytes]:  # fmt: skip
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Content-Type": "text/plain"} if body is not None else {}
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def client(port: int, model: str, tag: str, stop: threading.Event, tally: Tally) -> None:
    """Send requests one after another until `stop`; each ends in one bucket of `tally`."""
    n = 0
    while not stop.is_set():
        text = f"{tag}-{n}"
        n += 1
        with tally.lock:
            tally.sent += 1
        try:
            status, body = request("POST", port, f"/predictions/{model}", text.encode())
        except TimeoutError:
            tally.add("hung")
            continue
        except (ConnectionError, http.client.HTTPException, OSError) as e:
            tally.add("errored", f"connection {type(e).__name__}")
            time.sleep(0.01)  # a refused connection answers at once: do not spin
            continue
        if status == 200:
            tally.add("answered" if body.decode(errors="replace") == text else "lost")
        else:
            tally.add("errored", f"HTTP {status}")


def load(port: int, model: str, clients: int, stop: threading.Event, tally: Tally) -> list[threading.Thread]:
    threads = [threading.Thread(target=client, args=(port, model, f"c{i}", stop, tally), daemon=True)
               for i in range(clients)]  # fmt: skip
    for thread in threads:
        thread.start()
    return threads


def finish(threads: list[threading.Thread], tally: Tally) -> None:
    """Join the clients; one still blocked after the client timeout holds a request that is lost."""
    deadline = time.monotonic() + CLIENT_TIMEOUT + 5
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = sum(thread.is_alive() for thread in threads)
    for _ in range(stuck):
        tally.add("lost")


def build_store(base: Path) -> Path:
    store = base / "store"
    store.mkdir(parents=True, exist_ok=True)
    for name, delay, batch in (("echo", 0.02, 4), ("slow", 0.2, 1)):
        handler = base / f"{name}_handler.py"
        handler.write_text(ECHO.format(delay=delay))
        config = base / f"{name}.yaml"
        config.write_text(f"batchSize: {batch}\nmaxBatchDelay: 5\nminWorkers: {2 if name == 'echo' else 1}\n"
                          f"maxWorkers: {2 if name == 'echo' else 1}\n")  # fmt: skip
        package(name, "1.0", f"{handler}:handle", config_file=config, export_path=store, force=True, progress=False)
    return store


@dataclass
class Phase:
    name: str
    tally: Tally
    note: str
    exit_code: int | None
    healthy_after: bool = True  # /ping 200 after the fault (a worker replaced, the queue drained)


def kill_worker(base: Path, store: Path, clients: int, seconds: float) -> Phase:
    server = Server(base / "kill", store, "echo=echo.mar")
    tally, stop = Tally(), threading.Event()
    try:
        threads = load(server.ports["inference"], "echo", clients, stop, tally)
        settle(lambda: tally.answered > 0)
        time.sleep(min(2.0, seconds / 3))
        before = server.worker_pids("echo")
        os.kill(before[0], signal.SIGKILL)
        time.sleep(seconds - min(2.0, seconds / 3))
        stop.set()
        finish(threads, tally)
        replaced = settle(lambda: _replaced(before, server.worker_pids("echo")))
        healthy = request("GET", server.ports["inference"], "/ping")[0] == 200
    finally:
        code = server.stop()
    note = (f"worker {before[0]} killed; {'a new worker took its place' if replaced else 'NOT replaced'}; "
            f"/ping {'200' if healthy else 'not 200'} after; server exit {code}")  # fmt: skip
    return Phase("kill -9 a worker", tally, note, code, healthy and replaced)


def overflow(base: Path, store: Path, clients: int, seconds: float) -> Phase:
    server = Server(base / "overflow", store, "slow=slow.mar", job_queue_size=4)
    tally, stop = Tally(), threading.Event()
    try:
        threads = load(server.ports["inference"], "slow", clients, stop, tally)
        time.sleep(seconds)
        settle(lambda: tally.errored["HTTP 503"] > 0)
        stop.set()
        finish(threads, tally)
        healthy = request("GET", server.ports["inference"], "/ping")[0] == 200
    finally:
        code = server.stop()
    note = f"/ping {'200' if healthy else 'not 200'} after; server exit {code}"
    return Phase("queue overflow (job_queue_size=4)", tally, note, code, healthy)


def sigterm(base: Path, store: Path, clients: int, seconds: float) -> Phase:
    server = Server(base / "sigterm", store, "echo=echo.mar")
    tally, stop = Tally(), threading.Event()
    threads = load(server.ports["inference"], "echo", clients, stop, tally)
    settle(lambda: tally.answered > 0)
    time.sleep(seconds)
    t0 = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    try:
        code = server.proc.wait(120)
    except subprocess.TimeoutExpired:
        code = None
    exit_seconds = time.monotonic() - t0
    time.sleep(0.5)  # the clients see the closed port
    stop.set()
    finish(threads, tally)
    server.stop()
    still_listening = _listening(server.ports["inference"])
    note = (f"SIGTERM after {seconds:g} s; server exit {code} in {exit_seconds:.1f} s; "
            f"port {'still open' if still_listening else 'closed'} after")  # fmt: skip
    return Phase("SIGTERM the server mid-load", tally, note, code, not still_listening)


def settle(condition: Callable[[], bool]) -> bool:
    """Wait (up to SETTLE_SECONDS) until `condition()`; whether it holds."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def _replaced(before: list[int], after: list[int]) -> bool:
    return len(after) == len(before) and before[0] not in after


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def run(clients: int = 32, seconds: float = 6.0, base: Path | None = None) -> list[Phase]:
    with tempfile.TemporaryDirectory(prefix="fault_run_") as tmp:
        work = base or Path(tmp)
        store = build_store(work)
        return [kill_worker(work, store, clients, seconds), overflow(work, store, clients, seconds),
                sigterm(work, store, clients, seconds / 2)]  # fmt: skip


def table(phases: list[Phase], clients: int, seconds: float) -> str:
    lines = [f"`python bench/fault_run.py --write`, {time.strftime('%Y-%m-%d')}, {platform.machine()}, "
             f"{os.cpu_count()} CPUs, Python {platform.python_version()}; {clients} clients, {seconds:g} s a phase "
             f"(SIGTERM after {seconds / 2:g} s), client timeout {CLIENT_TIMEOUT:g} s.", "",
             "| phase | requests | answered | errored | hung | lost | after |",
             "|---|---:|---:|---|---:|---:|---|"]  # fmt: skip
    for p in phases:
        t = p.tally
        errored = ", ".join(f"{n} {kind}" for kind, n in sorted(t.errored.items())) or "0"
        lines.append(f"| {p.name} | {t.sent} | {t.answered} | {errored} | {t.hung} | {t.lost} | {p.note} |")
    return "\n".join(lines) + "\n"


def write(section: str) -> None:
    text = RESULTS.read_text()
    begin, end = "<!-- fault:begin -->", "<!-- fault:end -->"
    block = f"{begin}\n{section}{end}"
    if begin in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n## Fault run (issue 17)\n\n" + HEADING + "\n\n" + block + "\n"
    RESULTS.write_text(text)


HEADING = ("`bench/fault_run.py`: a real server under 32-way load is hurt three ways; every request is counted as "
           "answered, errored (the client was told), hung or lost (method in the script's docstring).")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="replace the fault-run section of bench/RESULTS.md")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=6.0, help="load per phase")
    args = parser.parse_args()
    phases = run(args.clients, args.seconds)
    section = table(phases, args.clients, args.seconds)
    print(section)
    if args.write:
        write(section)
    if any(p.tally.hung or p.tally.lost for p in phases):
        sys.exit(1)


if __name__ == "__main__":
    main()
