"""`ServeProcess`: a real `serve` for a benchmark, on ports it chose itself, in its own working directory.

    server = ServeProcess(workdir, store, "mlp=mlp.mar", ready="/v2/models/mlp/ready", job_queue_size=4)
    server.ports["inference"], server.ports["grpc_inference"], ...
    server.stop()   # SIGTERM, then kill after 60 s; its exit code

Every listener is configured with port 0 and the server writes the ports it bound to `ports.json` (as the
integration tests' tests/integration/server.py does): nothing picks a free port and binds it later. Token auth is
off. `properties` become config.properties lines; `ready` is the path that must answer 200 before the server counts
as started (`/ping` by default), waited for up to `start_seconds` (a bound for a machine at a load of 10: starting
real models takes minutes there), ending at once if the server exits; `nofile` lowers the server's RLIMIT_NOFILE;
`program` runs serve's command line instead of `python -m serve.cli.main` (bench/serve_h2.py).
The log is `server.log` in the working directory.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class ServeProcess:
    def __init__(self, workdir: Path, store: Path, models: str, ready: str = "/ping", start_seconds: float = 900.0,
                 nofile: int | None = None, program: list[str] | None = None,
                 **properties: object) -> None:  # fmt: skip
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir, self.ports_file = workdir, workdir / "ports.json"
        self.ports_file.unlink(missing_ok=True)
        lines = {"inference_address": "http://127.0.0.1:0", "management_address": "http://127.0.0.1:0",
                 "metrics_address": "http://127.0.0.1:0", "grpc_inference_port": 0, "grpc_management_port": 0,
                 "ports_file": self.ports_file, "number_of_gpu": 0, **properties}  # fmt: skip
        (workdir / "config.properties").write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        cmd = [*(program or [sys.executable, "-m", "serve.cli.main"]), "start", "--foreground", "--ncs",
               "--disable-token-auth", "--model-store", str(store), "--ts-config", str(workdir / "config.properties"),
               "--models", models]  # fmt: skip
        env = dict(os.environ, TMPDIR=str(workdir), PYTHONPATH=str(ROOT))
        with open(workdir / "server.log", "ab") as log:
            limit = None if nofile is None else functools.partial(resource.setrlimit, resource.RLIMIT_NOFILE,
                                                                  (nofile, nofile))  # fmt: skip
            self.proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=limit)  # fmt: skip
        self.ports = self._wait_ready(ready, start_seconds)

    def _wait_ready(self, path: str, seconds: float) -> dict[str, int]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}; see {self.workdir / 'server.log'}")
            if self.ports_file.exists():
                ports = json.loads(self.ports_file.read_text())
                if status(ports["inference"], path) == 200:
                    return ports
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{path} did not answer 200 within {seconds:g} s; see {self.workdir / 'server.log'}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def status(port: int, path: str) -> int:
    """The HTTP status of GET `path` on 127.0.0.1:`port`, 0 when nothing answers."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    except OSError:
        return 0
    finally:
        connection.close()
