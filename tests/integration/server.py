"""A real `serve` process on loopback ports it chose itself, and the small archives the integration tests register.

`ServerProcess` starts `python -m serve.cli.main start --foreground` in its own working directory (key file,
logs and snapshots land there; TMPDIR too, so its pid file is its own), waits for `/ping` to say ready, and stops
it with SIGTERM. Every wait is bounded, and generously: a start loads and warms real models (the examples take
~45 s on an idle 2-core machine, minutes at a load of 10), so the wait is for readiness, not for a duration. It
ends at once when the server process exits, with its log. A stop waits for the server's own bounded drain.

Every listener is configured with port 0 (`http://127.0.0.1:0`, `grpc_*_port=0`): the server binds a port the
system picks and writes the ports it got to `ports_file` (`ports.json` in its working directory), which `start`
reads. Nothing picks a free port first and binds it later, so no other process can take it in between.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

import serve
from serve import nn
from serve.archive import package

# Bounds for a machine at a load of 10, not targets: reached only by a server that neither gets ready nor exits.
START_SECONDS = 900
STOP_SECONDS = 300  # SIGTERM -> exit: the listeners' 30 s drain, then the workers' (unregister_model_timeout)
PROBE_SECONDS = 10  # one /ping while the machine is loaded
WAIT_SECONDS = 300  # for what the server does by itself: a worker restarted, requests queued, a model loaded

# A function entry point (TorchServe's `module:function` form): echoes each request, records batch sizes,
# and misbehaves on request: "sleep" takes a second, "hold" waits (up to a minute) until `<log>.release` exists,
# "die" kills the worker process.
RECORDER = """
import os
import time

LOG = {log!r}


def handle(data, context):
    if data is None:
        return None
    with open(LOG, "a") as f:
        f.write(f"{{len(data)}} {{os.getpid()}}\\n")
    out = []
    for row in data:
        body = row.get("body") if row.get("body") is not None else row.get("data")
        if isinstance(body, (bytes, bytearray)):
            body = body.decode()
        if body == "die":
            os._exit(3)
        if body == "sleep":
            time.sleep(1.0)
        if body == "hold":
            deadline = time.monotonic() + 60
            while not os.path.exists(LOG + ".release") and time.monotonic() < deadline:
                time.sleep(0.01)
        out.append({{"echo": body}})
    return out
"""

# A function entry point answering v2 BYTES: each request's first input upper-cased, as output "UPPER".
UPPER = """
def handle(data, context):
    if data is None:
        return None
    out = []
    for row in data:
        spec = row["body"]["inputs"][0]
        out.append({"outputs": [{"name": "UPPER", "datatype": "BYTES", "shape": spec["shape"],
                                 "data": [s.upper() for s in spec["data"]]}]})
    return out
"""


def recorder_archive(store: Path, name: str, log: Path, version: str = "1.0", file_name: str | None = None) -> Path:
    """`<store>/<file_name or name.mar>` holding the recorder handler as model `name`, version `version`."""
    handler = store.parent / f"{name}_{version.replace('.', '_')}_handler.py"
    handler.write_text(RECORDER.format(log=str(log)))
    built = package(name, version, f"{handler}:handle", export_path=store.parent / "build", force=True, progress=False)
    return built.replace(store / (file_name or built.name))


class ServerProcess:
    def __init__(self, workdir: Path, store: Path, *flags: str, **properties: Any) -> None:
        self.workdir, self.store, self.flags, self.properties = workdir, store, flags, properties
        workdir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        self.proc: subprocess.Popen[bytes] | None = None

    def _write_config(self) -> None:
        """config.properties with port 0 for every listener and the ports file the server reports them in."""
        self.ports: dict[str, int] = {}
        self.ports_file = self.workdir / "ports.json"
        listeners = {f"{name}_address": "http://127.0.0.1:0" for name in ("inference", "management", "metrics")}
        listeners |= {"grpc_inference_port": 0, "grpc_management_port": 0, "ports_file": self.ports_file}
        lines = [f"{key}={value}" for key, value in {"number_of_gpu": 0, **listeners, **self.properties}.items()]
        (self.workdir / "config.properties").write_text("\n".join(lines) + "\n")

    @property
    def inference(self) -> str:
        return f"http://127.0.0.1:{self.ports['inference']}"

    @property
    def management(self) -> str:
        return f"http://127.0.0.1:{self.ports['management']}"

    @property
    def metrics(self) -> str:
        return f"http://127.0.0.1:{self.ports['metrics']}"

    @property
    def grpc_inference(self) -> str:
        return f"127.0.0.1:{self.ports['grpc_inference']}"

    @property
    def grpc_management(self) -> str:
        return f"127.0.0.1:{self.ports['grpc_management']}"

    def start(self, healthy: bool = True) -> ServerProcess:
        """Start and wait until `/ping` says Healthy (with `healthy=False`: until it answers at all). A restart
        gets new ports."""
        self.launch()
        return self.wait_ready(healthy)

    def start_args(self) -> list[str]:
        """The arguments of `serve start` after `--foreground`: this server's store, config and flags."""
        return ["--model-store", str(self.store), "--ts-config", str(self.workdir / "config.properties"), *self.flags]

    def launch(self, cmd: list[str] | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start the server process without waiting: `cmd` (default `python -m serve.cli.main start --foreground`
        with start_args) in the working directory, with `env` (default this environment) and TMPDIR there."""
        self.ports_file.unlink(missing_ok=True)
        self.ports = {}
        cmd = cmd or [sys.executable, "-m", "serve.cli.main", "start", "--foreground", *self.start_args()]
        env = dict(os.environ if env is None else env, TMPDIR=str(self.workdir))
        with open(self.workdir / "server.log", "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
        return self.proc

    def read_ports(self) -> bool:
        """Whether the server has written its ports (once every listener is bound); `ports` holds them."""
        if not self.ports and self.ports_file.exists():  # written whole (renamed into place)
            self.ports = json.loads(self.ports_file.read_text())
        return bool(self.ports)

    def wait_ready(self, healthy: bool = True) -> ServerProcess:
        """Wait until the launched server's `/ping` says Healthy (`healthy=False`: answers at all); RuntimeError
        with its log when it exits first or is not ready within START_SECONDS (then it is killed)."""
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}:\n{self.log()}")
            if not self.read_ports():
                time.sleep(0.05)
                continue
            try:
                if httpx.get(self.inference + "/ping", timeout=PROBE_SECONDS).status_code == 200 or not healthy:
                    return self  # ready: the startup models have loaded
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.proc.kill()  # never leave a server behind a failed test
        self.proc.wait(10)
        raise RuntimeError(f"serve did not answer /ping within {START_SECONDS} s:\n{self.log()}")

    def stop(self, timeout: float = STOP_SECONDS) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise

    def log(self, tail: int = 4000) -> str:
        path = self.workdir / "server.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def key(self, kind: str) -> str:
        return json.loads((self.workdir / "key_file.json").read_text())[kind]["key"]


# `lin`: a 4 -> 3 linear layer behind the built-in `tensor` handler, with v2 tensor metadata in its model-config.
LIN_MODEL = """
from serve import nn


class Lin(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)
"""

LIN_CONFIG = """handler:
  dtype: float32
  inputs:
    - name: INPUT0
      datatype: FP32
      shape: [-1, 4]
  outputs:
    - name: OUTPUT0
      datatype: FP32
      shape: [-1, 3]
"""


class _Lin(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)


def lin_archive(src: Path, store: Path) -> Path:
    """`<store>/lin.mar` (sources written to `src`), with seeded weights saved by serve."""
    src.mkdir(parents=True, exist_ok=True)
    (src / "model.py").write_text(LIN_MODEL)
    (src / "model-config.yaml").write_text(LIN_CONFIG)
    serve.save(_Lin().state_dict(), src / "lin.pt")
    return package("lin", "1.0", "tensor", model_file=src / "model.py", serialized_file=src / "lin.pt",
                   config_file=src / "model-config.yaml", export_path=store, progress=False)  # fmt: skip
