"""The real TorchServe 0.12.0 for a benchmark: its venv, a .mar built with its archiver, the server started and
stopped by PID. Used by bench/server_bf16.py; the recipe is the anchor's (../shared/anchors/torchserve/anchors.sh).

    python = torchserve_python(work, venv)          # a venv with torch 2.13.0, TorchServe 0.12.0, pyyaml, numpy
    build_mar(python, store, "resnet50", weights, handler, extra_files)
    ts = TorchServeProcess(python, work, store)     # free loopback ports, token auth off, model API on
    ts.register("resnet50", batch_size=8, max_batch_delay=5)   # 1 worker, synchronous
    ts.stop()                                       # the JVM, then its Python workers, by PID

Decisions:
- The venv: the given one when it already imports torch, ts, yaml and model_archiver (the anchor's, left in
  /tmp/ts-anchor by bench/server.py or anchors.sh), else one made in `work` with the anchor's pins (`torch==2.13.0`:
  an unpinned torch pulls GBs of CUDA; pyyaml: TorchServe's worker imports it without declaring it). Installing is
  bounded (30 minutes); when it fails, TorchServeUnavailable says why and the caller gives serve-only figures.
- TorchServe keeps one PID file for the whole machine (/tmp/.model_server.pid): when it names a live process,
  another TorchServe is running and this one is not started (TorchServeUnavailable); nothing else is stopped.
- The JVM's stdout goes to /dev/null, as in anchors.sh (its console appender repeats every log line); its logs are
  in `work/logs`. Ports are free loopback ports picked when the config is written.
- Every wait is bounded: start 180 s, registration `register_s`, stop 30 s (then SIGKILL).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

PID_FILE = Path("/tmp/.model_server.pid")
IMPORTS = "import torch, ts, yaml, numpy, model_archiver"


class TorchServeUnavailable(RuntimeError):
    """TorchServe cannot run here; the message says why."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _works(python: Path) -> bool:
    if not python.exists():
        return False
    return subprocess.run([str(python), "-c", IMPORTS], capture_output=True, timeout=120).returncode == 0


def torchserve_python(work: Path, venv: Path | None) -> Path:
    """The python of a venv that runs TorchServe: `venv` when it does, else one installed under `work`."""
    if venv is not None and _works(venv / "bin" / "python"):
        return venv / "bin" / "python"
    own = work / ".venv"
    python = own / "bin" / "python"
    if _works(python):
        return python
    steps = [["python3", "-m", "venv", str(own)], [str(python), "-m", "pip", "install", "torch==2.13.0"],
             [str(python), "-m", "pip", "install", "torchserve==0.12.0", "torch-model-archiver==0.12.0", "pyyaml",
              "numpy"]]  # fmt: skip
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=1800)
        except subprocess.TimeoutExpired:
            raise TorchServeUnavailable(f"`{' '.join(step)}` did not finish in 30 minutes") from None
        if done.returncode:
            raise TorchServeUnavailable(f"`{' '.join(step)}` failed: {done.stderr.strip()[-600:]}")
    if not _works(python):
        raise TorchServeUnavailable(f"{own} was installed but does not import torch, ts, yaml, model_archiver")
    return python


def build_mar(python: Path, store: Path, name: str, weights: Path, handler: Path, extra_files: list[Path]) -> Path:
    """`name`.mar in `store`, with TorchServe's own torch-model-archiver (as the anchor's make_mars.py does)."""
    store.mkdir(parents=True, exist_ok=True)
    cmd = [str(python.parent / "torch-model-archiver"), "--model-name", name, "--version", "1.0",
           "--serialized-file", str(weights), "--handler", str(handler),
           "--extra-files", ",".join(str(f) for f in extra_files), "--export-path", str(store), "--force"]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    return store / f"{name}.mar"


def _http(method: str, url: str, timeout: float) -> str:
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=timeout) as response:
        return response.read().decode()


class TorchServeProcess:
    def __init__(self, python: Path, work: Path, store: Path, threads: int = 2) -> None:
        if PID_FILE.exists():
            try:
                other = int(PID_FILE.read_text().strip())
                os.kill(other, 0)
            except (ValueError, OSError):
                pass  # a stale file: TorchServe overwrites it
            else:
                raise TorchServeUnavailable(f"another TorchServe (pid {other}, {PID_FILE}) is running; stop it first")
        self.ports = {n: _free_port() for n in ("inference", "management", "metrics")}
        self.worker_pids: list[int] = []
        config = work / "bench.properties"
        config.write_text("".join(f"{n}_address=http://127.0.0.1:{p}\n" for n, p in self.ports.items()) + (
            "disable_token_authorization=true\nenable_model_api=true\ndefault_workers_per_model=1\n"
            "install_py_dep_per_model=false\nmax_request_size=20000000\nmax_response_size=20000000\n"
            "job_queue_size=1000\n"))  # fmt: skip
        env = dict(os.environ, PATH=f"{python.parent}:{os.environ.get('PATH', '')}",
                   VIRTUAL_ENV=str(python.parent.parent), BENCH_TORCH_THREADS=str(threads),
                   BENCH_HIST_DIR=str(work / "hist"))  # fmt: skip
        cmd = [str(python.parent / "torchserve"), "--start", "--ncs", "--ts-config", str(config), "--model-store",
               str(store), "--disable-token-auth", "--enable-model-api"]  # fmt: skip
        subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        self.pid = int(PID_FILE.read_text().strip()) if PID_FILE.exists() else 0
        deadline = time.monotonic() + 180
        while True:
            try:
                _http("GET", f"http://127.0.0.1:{self.ports['inference']}/ping", 10)
                return
            except OSError:
                if time.monotonic() > deadline or not self._alive(self.pid):
                    self.stop()
                    raise TorchServeUnavailable(
                        f"TorchServe did not answer /ping within 180 s; see {work}/logs"
                    ) from None
                time.sleep(0.5)

    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            os.kill(pid, 0) if pid > 0 else None
            return pid > 0
        except OSError:
            return False

    def register(self, name: str, batch_size: int, max_batch_delay: int, register_s: float) -> None:
        """The anchor's registration: 1 worker, synchronous; the worker PIDs kept for stop()."""
        base = f"http://127.0.0.1:{self.ports['management']}/models"
        _http("POST", f"{base}?url={name}.mar&batch_size={batch_size}&max_batch_delay={max_batch_delay}"
                      "&initial_workers=1&synchronous=true", register_s)  # fmt: skip
        self.worker_pids += [int(w["pid"]) for w in json.loads(_http("GET", f"{base}/{name}", 30))[0]["workers"]]

    def stop(self) -> None:
        """SIGTERM the JVM and wait up to 30 s (then SIGKILL); then any of its Python workers still alive."""
        for pid, grace in [(self.pid, 30.0), *((p, 5.0) for p in self.worker_pids)]:
            if not self._alive(pid):
                continue
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self._alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if self._alive(pid):
                os.kill(pid, signal.SIGKILL)
