"""The server under load: serve against TorchServe on the TorchServe anchor's workloads, with wrk.

    .venv/bin/python bench/server.py                      # serve only (a table of req/s, p50, p99, peak RSS)
    .venv/bin/python bench/server.py --torchserve         # also runs the anchor (../shared/anchors/torchserve)
    .venv/bin/python bench/server.py --torchserve --write # and replaces the server table in bench/RESULTS.md

The workloads are the anchor's (anchors.sh): MLP 64-128-10 with a JSON body of 64 floats at concurrency 1, 8 and
32, ResNet-18 with a `.npy` float32 3x224x224 body at 1 and 8; each model registered with batch_size 8,
max_batch_delay 5 ms and 1 worker; wrk `-t1 -c<conc> -d<secs>s` with the anchor's `post.lua`. serve runs the
anchor's own `models.py` (plain PyTorch, loaded with torch compatibility) behind `serve_bench_handler.py`, the
twin of the anchor's handler (MLP: 10 logits; ResNet-18: top-5 `[index, logit]`). Weights are random (seeded):
speed does not depend on them. Peak RSS is the sum over the server process and its workers, sampled during the
load. The TorchServe figures come from running `anchors.sh` (SKIP_EAGER=1) in the same invocation, right after.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ANCHOR = ROOT.parent / "shared" / "anchors" / "torchserve"
OUT = ROOT / "bench" / "out" / "server"
RESULTS = ROOT / "bench" / "RESULTS.md"
BEGIN, END = "<!-- server:begin -->", "<!-- server:end -->"
CASES = [("mlp", "json", 1), ("mlp", "json", 8), ("mlp", "json", 32), ("resnet18", "npy", 1), ("resnet18", "npy", 8)]
BODIES = {"json": ("mlp.json", "application/json"), "npy": ("img.npy", "application/octet-stream")}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_archives(store: Path) -> None:
    """mlp.mar and resnet18.mar for serve: the anchor's models.py, our twin handler, seeded serve weights."""
    sys.path.insert(0, str(ROOT))
    import serve
    from serve.archive import package
    from serve.worker.handler_loader import import_user_file

    store.mkdir(parents=True, exist_ok=True)
    build = OUT / "build"
    build.mkdir(parents=True, exist_ok=True)
    models = import_user_file(ANCHOR, "models.py", torch_compat=True)
    for name in ("mlp", "resnet18"):
        weights = build / f"{name}.pt"
        serve.save(models.build(name).state_dict(), weights)
        handler = str(ROOT / "bench" / "serve_bench_handler.py")
        package(name, "1.0", handler, serialized_file=weights, extra_files=[ANCHOR / "models.py"], export_path=store,
                archive_format="zip-store", force=True)  # fmt: skip


def write_payloads(dest: Path) -> None:
    """The anchor's request bodies (make_payloads.py: seed 0)."""
    import io

    rng = np.random.default_rng(0)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "mlp.json").write_text(json.dumps([round(float(v), 6) for v in rng.standard_normal(64)]))
    buf = io.BytesIO()
    np.save(buf, rng.standard_normal((3, 224, 224)).astype(np.float32))
    (dest / "img.npy").write_bytes(buf.getvalue())


def _rss_kib(pid: int) -> int:
    """VmRSS of a process and all its descendants."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
            for task in Path(f"/proc/{p}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, AttributeError):
            continue
    return total


class PeakRss:
    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, _rss_kib(self.pid))

    def __enter__(self) -> PeakRss:
        self.peak = _rss_kib(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def wrk(url: str, body: Path, ctype: str, conc: int, secs: int) -> dict[str, float]:
    env = dict(os.environ, BODY_FILE=str(body), CONTENT_TYPE=ctype)
    cmd = ["wrk", "-t1", f"-c{conc}", f"-d{secs}s", "--timeout", "30s", "-s", str(ANCHOR / "post.lua"), url]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    line = next(row for row in out.splitlines() if row.startswith("RESULT"))
    return {k: float(v) for k, v in re.findall(r"(\w+)=([^\s]+)", line)}


def _http(method: str, url: str) -> str:
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=300) as response:
        return response.read().decode()


def _batch_totals(metrics_url: str, model: str) -> tuple[float, float]:
    """(sum, count) of the ts_batch_size histogram of a model, from /metrics."""
    text = _http("GET", metrics_url)
    found = {kind: float(v) for kind, v in re.findall(
        rf'ts_batch_size_(sum|count)\{{[^}}]*model_name="{model}"[^}}]*\}} ([0-9.e+]+)', text)}  # fmt: skip
    return found.get("sum", 0.0), found.get("count", 0.0)


@contextlib.contextmanager
def serving(
    store: Path, name: str, extra: list[str] | None = None, program: list[str] | None = None
) -> Iterator[tuple[dict[str, int], subprocess.Popen]]:
    """A `serve` process on free loopback ports (token auth off, model API on), ready to answer; its ports by
    listener and the process; SIGTERM on exit. Config and log are `OUT/<name>.properties` and `OUT/<name>.log`.
    `program`: what runs serve's command line (default `python -m serve.cli.main`; bench/serve_h2.py for one)."""
    ports = {n: _free_port() for n in ("inference", "management", "metrics", "grpc_inference", "grpc_management")}
    config = OUT / f"{name}.properties"
    config.write_text("\n".join([
        *(f"{n}_address=http://127.0.0.1:{ports[n]}" for n in ("inference", "management", "metrics")),
        f"grpc_inference_port={ports['grpc_inference']}", f"grpc_management_port={ports['grpc_management']}",
        *(extra or []),
    ]) + "\n")  # fmt: skip
    cmd = [*(program or [sys.executable, "-m", "serve.cli.main"]), "start", "--foreground", "--ncs",
           "--model-store", str(store), "--ts-config", str(config), "--disable-token-auth",
           "--enable-model-api"]  # fmt: skip
    with open(OUT / f"{name}.log", "wb") as log:
        server = subprocess.Popen(cmd, cwd=OUT, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _http("GET", f"http://127.0.0.1:{ports['inference']}/ping")
                break
            except OSError:  # not listening yet, or 500 while the startup models load
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"serve did not start: see {OUT / f'{name}.log'}") from None
                time.sleep(0.2)
        yield ports, server
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()


def register(ports: dict[str, int], model: str) -> None:
    """The anchor's registration: batch_size 8, max_batch_delay 5 ms, 1 worker, synchronous."""
    _http("POST", f"http://127.0.0.1:{ports['management']}/models?url={model}.mar&batch_size=8&max_batch_delay=5"
                  "&initial_workers=1&synchronous=true")  # fmt: skip


def run_serve(secs: int) -> tuple[dict[tuple[str, str, int], dict[str, float]], int]:
    store, payloads = OUT / "store", OUT / "payloads"
    build_archives(store)
    write_payloads(payloads)
    limits = ["max_request_size=20000000", "max_response_size=20000000", "job_queue_size=1000"]
    with serving(store, "server", limits) as (ports, server):
        base = f"http://127.0.0.1:{ports['inference']}"
        metrics = f"http://127.0.0.1:{ports['metrics']}/metrics"
        for name in ("mlp", "resnet18"):
            register(ports, name)
        results = {}
        with PeakRss(server.pid) as rss:
            for model, fmt in (("mlp", "json"), ("resnet18", "npy")):  # warm-up, as the anchor does
                wrk(f"{base}/predictions/{model}", payloads / BODIES[fmt][0], BODIES[fmt][1], 8, 5)
            for model, fmt, conc in CASES:
                body, ctype = BODIES[fmt]
                total0, count0 = _batch_totals(metrics, model)
                results[(model, fmt, conc)] = wrk(f"{base}/predictions/{model}", payloads / body, ctype, conc, secs)
                total1, count1 = _batch_totals(metrics, model)
                results[(model, fmt, conc)]["batch"] = (total1 - total0) / max(count1 - count0, 1)
                print(f"serve {model} {fmt} c{conc}: {results[(model, fmt, conc)]}", flush=True)
        return results, rss.peak


def run_torchserve(secs: int) -> tuple[dict[tuple[str, str, int], dict[str, float]], int]:
    """anchors.sh in a copy of the anchor folder; its per-case wrk outputs parsed; peak RSS sampled meanwhile."""
    work = Path("/tmp/ts-anchor")
    if not work.exists():
        shutil.copytree(ANCHOR, work)
    env = dict(os.environ, REPS="1", DUR=str(secs), SKIP_EAGER="1")
    proc = subprocess.Popen(["bash", str(work / "anchors.sh")], cwd=work, env=env)
    peak = 0
    while proc.poll() is None:
        pid_file = Path("/tmp/.model_server.pid")
        if pid_file.exists():
            with contextlib.suppress(ValueError):
                peak = max(peak, _rss_kib(int(pid_file.read_text().strip())))
        time.sleep(0.5)
    if proc.returncode:
        raise RuntimeError(f"anchors.sh failed ({proc.returncode}); see {work}/results")
    latest = max((work / "results").iterdir())
    results = {}
    for model, fmt, conc in CASES:
        text = (latest / f"ts_{model}_{fmt}_c{conc}_rep1.txt").read_text()
        line = next(row for row in text.splitlines() if row.startswith("RESULT"))
        results[(model, fmt, conc)] = {k: float(v) for k, v in re.findall(r"(\w+)=([^\s]+)", line)}
    return results, peak


def table(ours: dict, rss: int, theirs: dict | None, ts_rss: int, command: str, secs: int) -> str:
    lines = [
        f"`{command}` on {datetime.date.today().isoformat()}: wrk -t1 -d{secs}s, batch_size 8, max_batch_delay "
        f"5 ms, 1 worker per model; {os.cpu_count()} CPUs shared by server and load generator. Ratios: serve "
        "throughput / TorchServe's (above 1: serve faster) and serve p50 / TorchServe's (below 1: serve faster).",
        "",
        "| workload | serve req/s | serve p50 ms | serve p99 ms | serve mean batch | TorchServe req/s | "
        "TorchServe p50 ms | TorchServe p99 ms | req/s ratio | p50 ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in CASES:
        s = ours[key]
        t = (theirs or {}).get(key)
        tail = (f"{t['rps']:.0f} | {t['p50_ms']:.2f} | {t['p99_ms']:.2f} | {s['rps'] / t['rps']:.2f} | "
                f"{s['p50_ms'] / t['p50_ms']:.2f}" if t else "- | - | - | - | -")  # fmt: skip
        errors = f" ({int(s['errors'])} errors)" if s["errors"] else ""
        lines.append(f"| {key[0]} {key[1]} c{key[2]}{errors} | {s['rps']:.0f} | {s['p50_ms']:.2f} | "
                     f"{s['p99_ms']:.2f} | {s['batch']:.2f} | {tail} |")  # fmt: skip
    lines += ["", f"Peak RSS of all server processes: serve {rss / 1024:.0f} MiB"
              + (f", TorchServe {ts_rss / 1024:.0f} MiB (the JVM and its Python workers)"
                 if theirs else "") + "."]  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=15, help="wrk duration per case")
    parser.add_argument("--torchserve", action="store_true", help="also run the TorchServe anchor (minutes)")
    parser.add_argument("--write", action="store_true", help="replace the server table in bench/RESULTS.md")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench/server.py needs wrk (Debian: apt-get install wrk)")
    ours, rss = run_serve(args.seconds)
    theirs, ts_rss = run_torchserve(args.seconds) if args.torchserve else (None, 0)
    text = table(ours, rss, theirs, ts_rss, "python bench/server.py " + " ".join(sys.argv[1:]), args.seconds)
    print(text)
    if args.write:
        old = RESULTS.read_text()
        if BEGIN not in old:
            old += f"\n## Server under load\n\n{BEGIN}\n{END}\n"
        head, _, rest = old.partition(BEGIN)
        RESULTS.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.partition(END)[2]}")


if __name__ == "__main__":
    main()
