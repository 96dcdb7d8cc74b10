"""Triton's perf_analyzer against serve, over HTTP and gRPC, concurrency 1 to 8 (issue 19 item 5).

    .venv/bin/python bench/perf_analyzer.py            # prints the table
    .venv/bin/python bench/perf_analyzer.py --write    # also replaces the perf_analyzer table in bench/RESULTS.md

One real `serve` process on 127.0.0.1 (port 0 for every listener, read back from its ports file) serving `mlp`:
a serve.nn MLP 64-128-10 (seeded weights) behind the built-in `tensor` handler, batchSize 8, maxBatchDelay 5 ms,
1 worker (bench/server.py's registration), with a model-config that declares its tensors (`INPUT0` FP32 [-1, 64],
`OUTPUT0` FP32 [-1, 10]) so that the Open Inference Protocol's `/v2/models/mlp/config` and gRPC ModelConfig answer
what perf_analyzer reads (serve/frontends/oip/repository.py). perf_analyzer (`--service-kind=triton`, sync, one
request of batch 1 per call, random FP32 data) runs once per protocol and concurrency (`--concurrency-range c:c`,
c = 1..8), alternating `-i http` and `-i grpc` `--rounds` times at each c, in bounded time windows
(`--measurement-interval`, `--max-trials`, `--stability-percentage`), writing its CSV (`-f`); the table quotes the
median run of each. A run that finds no stable measurement within its windows (a busy machine) is left out and
counted under the table; any other failure stops the script with perf_analyzer's output.

The binary: the `perf-analyzer` wheel (the `bench` extra) ships it as `perf_analyzer/bin/perf_analyzer`. Its
wheels are tagged manylinux_2_38 (glibc 2.38, libstdc++ of GCC 13), so on an older system (Debian 12 has glibc
2.36) pip installs the 0.1.0 placeholder instead, which has no binary. There, fetch the real wheel and a newer
glibc and libstdc++ by hand and point this script at them (nothing is installed system-wide):

    pip download perf-analyzer==2.60.0 --no-deps --only-binary=:all: --platform manylinux_2_38_x86_64 -d /tmp/pa
    python -m zipfile -e /tmp/pa/perf_analyzer-2.60.0-*.whl /tmp/pa/wheel && chmod +x /tmp/pa/wheel/perf_analyzer/bin/*
    # libc6, libstdc++6 and libgcc-s1 from Debian 13 (trixie), with apt's own lists and cache under /tmp/pa/apt:
    mkdir -p /tmp/pa/apt/lists/partial /tmp/pa/apt/cache/archives/partial && cd /tmp/pa/apt
    # sources.list here: one `deb` line for the system's Debian mirror (as in /etc/apt/sources.list.d), suite trixie
    A="-o Dir::Etc::SourceList=$PWD/sources.list -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$PWD/lists
       -o Dir::Cache=$PWD/cache -o Dir::State::status=/dev/null"
    apt-get $A update && apt-get $A download libc6 libstdc++6 libgcc-s1
    for deb in *.deb; do dpkg-deb -x $deb /tmp/pa/root; done; cd -
    .venv/bin/python bench/perf_analyzer.py --binary /tmp/pa/wheel/perf_analyzer/bin/perf_analyzer \\
        --libs /tmp/pa/root/usr/lib/x86_64-linux-gnu

`--libs DIR` runs the binary through `DIR/ld-linux-x86-64.so.2 --library-path DIR:<system libs>`.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import importlib.metadata
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))
from serve_process import ServeProcess  # noqa: E402

RESULTS = Path(__file__).with_name("RESULTS.md")
BEGIN, END = "<!-- perf_analyzer:begin -->", "<!-- perf_analyzer:end -->"
MODEL = "mlp"
START_SECONDS = 900.0  # a bound for a loaded machine, not a target

MLP_SOURCE = """
from serve import nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())
"""

MLP_CONFIG = """batchSize: 8
maxBatchDelay: 5
minWorkers: 1
maxWorkers: 1
handler:
  dtype: float32
  inputs:
    - name: INPUT0
      datatype: FP32
      shape: [-1, 64]
  outputs:
    - name: OUTPUT0
      datatype: FP32
      shape: [-1, 10]
"""


def build_archive(work: Path) -> Path:
    """`<work>/store/mlp.mar`: the MLP above with seeded weights saved by serve, behind the `tensor` handler."""
    import serve
    from serve import nn
    from serve.archive import package

    src, store = work / "src", work / "store"
    src.mkdir(parents=True, exist_ok=True)
    store.mkdir(parents=True, exist_ok=True)
    (src / "model.py").write_text(MLP_SOURCE)
    (src / "model-config.yaml").write_text(MLP_CONFIG)
    serve.manual_seed(0)
    weights = nn.Module()
    weights.fc1, weights.fc2 = nn.Linear(64, 128), nn.Linear(128, 10)
    serve.save(weights.state_dict(), src / "mlp.pt")
    package(MODEL, "1.0", "tensor", model_file=src / "model.py", serialized_file=src / "mlp.pt",
            config_file=src / "model-config.yaml", export_path=store, progress=False)  # fmt: skip
    return store


def start_server(work: Path, store: Path) -> ServeProcess:
    """serve on ports it chose, serving `mlp`, started once the model is ready over the Open Inference Protocol."""
    return ServeProcess(work, store, f"{MODEL}={MODEL}.mar", ready=f"/v2/models/{MODEL}/ready",
                        start_seconds=START_SECONDS)  # fmt: skip


def find_binary(given: str | None) -> Path:
    """`--binary`, else the `perf-analyzer` wheel's binary; SystemExit saying why when there is none. (Looked up
    through the distribution's files: the `perf_analyzer` module name is this script's own when it runs.)"""
    if given:
        return Path(given)
    try:
        dist = importlib.metadata.distribution("perf-analyzer")
    except importlib.metadata.PackageNotFoundError:
        sys.exit("perf_analyzer is not installed: pip install -e '.[bench]' (or --binary PATH; see the docstring)")
    binary = Path(str(dist.locate_file("perf_analyzer/bin/perf_analyzer")))
    if not binary.exists():
        sys.exit(f"the installed perf-analyzer {dist.version} has no binary ({binary} missing): pip takes the 0.1.0 "
                 "placeholder where glibc is older than 2.38; see this script's docstring")  # fmt: skip
    return binary


def launcher(binary: Path, libs: str | None) -> list[str]:
    """The argv prefix that runs perf_analyzer: the binary, or the binary through the loader in `libs`."""
    if libs is None:
        return [str(binary)]
    system = ":".join(p for p in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu") if Path(p).is_dir())
    return [str(Path(libs) / "ld-linux-x86-64.so.2"), "--library-path", f"{libs}:{system}", str(binary)]


def version(prefix: list[str], binary: Path) -> str:
    """The wheel's version and perf_analyzer's `--version` line; RuntimeError with its own error text when it
    cannot start."""
    done = subprocess.run([*prefix, "--version"], capture_output=True, text=True, timeout=60)
    text = (done.stdout + done.stderr).strip()
    if done.returncode != 0 or "Perf Analyzer" not in text:
        raise RuntimeError(f"perf_analyzer cannot run here (exit {done.returncode}): {text}")
    wheels = sorted(binary.resolve().parents[2].glob("perf_analyzer-*.dist-info"))
    release = wheels[-1].name.removesuffix(".dist-info").split("-")[1] if wheels else ""
    wheel = f"the perf-analyzer {release} wheel's binary" if wheels else "a binary"
    return f"perf_analyzer from {wheel} (`--version`: {text.splitlines()[0]})"


def options_for(protocol: str, url: str, concurrency: int, csv_path: Path, args: argparse.Namespace) -> list[str]:
    return ["-m", MODEL, "-i", protocol, "-u", url, "--concurrency-range", f"{concurrency}:{concurrency}",
            "--measurement-interval", str(args.interval_ms), "--max-trials", str(args.max_trials),
            "--stability-percentage", str(args.stability), "-f", str(csv_path)]  # fmt: skip


def profile(prefix: list[str], options: list[str], timeout: float) -> dict[str, float] | None:
    """One perf_analyzer run at one concurrency: its CSV row, or None when it found no stable measurement within
    --max-trials windows (the machine too noisy); RuntimeError for any other failure."""
    csv_path = Path(options[-1])
    done = subprocess.run([*prefix, *options], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 and "Failed to obtain stable measurement" in done.stdout + done.stderr:
        return None
    if done.returncode != 0 or not csv_path.exists():
        raise RuntimeError(f"perf_analyzer {shlex.join(options)} failed ({done.returncode}):\n{done.stdout}\n"
                           f"{done.stderr}")  # fmt: skip
    (row,) = parse(csv_path).values()
    return row


def parse(csv_path: Path) -> dict[int, dict[str, float]]:
    """perf_analyzer's CSV: per concurrency, infer/s and p50/p90/p99 latency (its microseconds, as ms)."""
    rows: dict[int, dict[str, float]] = {}
    with csv_path.open() as f:
        for row in csv.DictReader(f):
            rows[int(row["Concurrency"])] = {
                "rate": float(row["Inferences/Second"]),
                **{p: float(row[f"{p} latency"]) / 1e3 for p in ("p50", "p90", "p99")},
            }
    return rows


def measure(prefix: list[str], ports: dict[str, int], work: Path, args: argparse.Namespace) -> Runs:
    """Per protocol, per concurrency, the rows of the runs that were stable and the count of those that were not.
    Each concurrency runs HTTP, gRPC, HTTP, gRPC, ... (`--rounds` each), so the ratio compares neighbours."""
    urls = {"http": f"127.0.0.1:{ports['inference']}", "grpc": f"127.0.0.1:{ports['grpc_inference']}"}
    runs = Runs()
    for conc in range(1, args.max_concurrency + 1):
        for round_ in range(args.rounds):
            for protocol, url in urls.items():
                options = options_for(protocol, url, conc, work / f"{protocol}-c{conc}-{round_}.csv", args)
                runs.options[protocol] = options
                row = profile(prefix, options, args.timeout)
                if row is None:
                    runs.unstable[protocol] = runs.unstable.get(protocol, 0) + 1
                else:
                    runs.rows[protocol].setdefault(conc, []).append(row)
                print(f"c{conc} round {round_ + 1} {protocol}: " + (f"{row['rate']:.0f}/s, p50 {row['p50']:.2f} ms"
                      if row else "no stable measurement"), flush=True)  # fmt: skip
    return runs


@dataclasses.dataclass
class Runs:
    rows: dict[str, dict[int, list[dict[str, float]]]] = dataclasses.field(
        default_factory=lambda: {"http": {}, "grpc": {}}
    )
    unstable: dict[str, int] = dataclasses.field(default_factory=dict)
    options: dict[str, list[str]] = dataclasses.field(default_factory=dict)


def _median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def _cells(rows: list[dict[str, float]]) -> list[str]:
    if not rows:
        return ["-"] * 4
    return [f"{_median(rows, 'rate'):.0f}", *(f"{_median(rows, p):.2f}" for p in ("p50", "p90", "p99"))]


def _spread(rows: dict[int, list[dict[str, float]]]) -> float:
    """The largest (max - min) / median of infer/s between the runs at one concurrency."""
    return max(((max(r["rate"] for r in runs) - min(r["rate"] for r in runs)) / _median(runs, "rate")
                for runs in rows.values() if runs), default=0.0)  # fmt: skip


def table(runs: Runs, pa_version: str, args: argparse.Namespace) -> str:
    options = runs.options["http"]
    url = options[options.index("-u") + 1]
    shown = shlex.join(options[:-2]).replace(url, "127.0.0.1:<port>").replace(
        f"{args.max_concurrency}:{args.max_concurrency}", "<c>:<c>") + " -f <csv>"  # fmt: skip
    lines = [
        f"`python bench/perf_analyzer.py {' '.join(sys.argv[1:])}` on {datetime.date.today().isoformat()}, "
        f"{pa_version}, {os.cpu_count()} CPUs ({_cpu_model()}) shared by serve, perf_analyzer and other work; "
        f"perf_analyzer `{shown}` per concurrency (`-i grpc` with the gRPC port), HTTP and gRPC alternated "
        f"{args.rounds} times at each concurrency, median run quoted. MLP 64-128-10 behind the `tensor` handler, "
        "batchSize 8, maxBatchDelay 5 ms, 1 worker; one FP32[1, 64] request per call, sync. Latency in ms (client "
        "side, perf_analyzer's).",
        "",
        "| concurrency | HTTP infer/s | HTTP p50 | HTTP p90 | HTTP p99 | gRPC infer/s | gRPC p50 | gRPC p90 | "
        "gRPC p99 | gRPC / HTTP infer/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for conc in range(1, args.max_concurrency + 1):
        h, g = runs.rows["http"].get(conc, []), runs.rows["grpc"].get(conc, [])
        ratio = f"{_median(g, 'rate') / _median(h, 'rate'):.2f}" if g and h else "-"
        lines.append(f"| {conc} | " + " | ".join([*_cells(h), *_cells(g), ratio]) + " |")
    unstable = ", ".join(f"{p} {n}" for p, n in runs.unstable.items()) or "none"
    lines += ["", "Noise: the largest spread of infer/s between the runs at one concurrency (max - min over the "
              f"median) was HTTP {_spread(runs.rows['http']):.0%}, gRPC {_spread(runs.rows['grpc']):.0%}; runs "
              f"without a stable measurement within {args.max_trials} windows (left out): {unstable}; load average "
              f"(1 min) at the end: {os.getloadavg()[0]:.1f}."]  # fmt: skip
    return "\n".join(lines)


def failure_note(error: str) -> str:
    return (f"`python bench/perf_analyzer.py {' '.join(sys.argv[1:])}` on {datetime.date.today().isoformat()} "
            f"({_cpu_model()}): no table, perf_analyzer did not run.\n\n```\n{error}\n```")  # fmt: skip


def write(text: str) -> None:
    old = RESULTS.read_text()
    if BEGIN not in old:
        old += f"\n## perf_analyzer over HTTP and gRPC (issue 19)\n\n{BEGIN}\n{END}\n"
    head, _, rest = old.partition(BEGIN)
    RESULTS.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.partition(END)[2]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", help="perf_analyzer binary (default: the perf-analyzer wheel's)")
    parser.add_argument("--libs", help="a folder with a newer glibc and libstdc++ to run the binary with")
    parser.add_argument("--max-concurrency", type=int, default=8)
    parser.add_argument("--interval-ms", type=int, default=1000, help="perf_analyzer --measurement-interval")
    parser.add_argument("--max-trials", type=int, default=8, help="perf_analyzer --max-trials (windows per level)")
    parser.add_argument("--stability", type=int, default=30, help="perf_analyzer --stability-percentage")
    parser.add_argument("--rounds", type=int, default=3, help="runs per protocol and concurrency; medians quoted")
    parser.add_argument("--timeout", type=float, default=600, help="seconds one perf_analyzer run may take")
    parser.add_argument("--write", action="store_true", help="replace the perf_analyzer table in bench/RESULTS.md")
    args = parser.parse_args()
    binary = find_binary(args.binary)
    prefix = launcher(binary, args.libs)
    try:
        pa_version = version(prefix, binary)
    except RuntimeError as e:
        print(failure_note(str(e)))
        if args.write:
            write(failure_note(str(e)))
        sys.exit(1)
    with tempfile.TemporaryDirectory(prefix="serve-pa-") as tmp:
        work = Path(tmp)
        server = start_server(work / "run", build_archive(work))
        try:
            runs = measure(prefix, server.ports, work, args)
        finally:
            server.stop()
    text = table(runs, pa_version, args)
    print(text)
    if args.write:
        write(text)


if __name__ == "__main__":
    main()
