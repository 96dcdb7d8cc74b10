"""CPU per REST prediction of serve's server process and of its worker, under wrk, for revisions side by side.

    .venv/bin/python bench/rest_cpu.py                              # the working tree
    .venv/bin/python bench/rest_cpu.py 58e3142 HEAD --rounds 12     # revisions, their blocks alternated
    .venv/bin/python bench/rest_cpu.py 58e3142 HEAD --write         # and replaces the table in bench/RESULTS.md

The MLP of bench/server.py (a JSON list of 64 floats, batch_size 8, max_batch_delay 5 ms, 1 worker) under
`wrk -t1 -c32` (`--conc`). Each revision is `git archive`d into a temporary directory (the native kernels copied
from the working tree) and served with that directory first on PYTHONPATH; all are started, registered and warmed,
then wrk runs `--seconds` blocks against each in turn, the order reversed every round, so drifts of the machine's
load fall on every revision alike. A block's CPU per request is the change of utime + stime (/proc/<pid>/stat) of
the server process, and of its worker, divided by the requests wrk counted.

Why CPU per request and not requests/s: the server's event loop is the bottleneck at 32 connections, and on a
shared 2-core machine requests/s follows what else runs, while CPU per request moves far less (it still rises
with the load, through caches and stolen cycles: compare revisions within one run, by their medians and by the
median of the per-round ratios, which this prints).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from server import BODIES, OUT, build_archives, register, serving, write_payloads, wrk  # noqa: E402

RESULTS = ROOT / "bench" / "RESULTS.md"
BEGIN, END = "<!-- rest_cpu:begin -->", "<!-- rest_cpu:end -->"
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def children(pid: int) -> list[int]:
    return [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]


def checkout(revision: str, into: Path) -> Path:
    """The revision's files in `into` (the working tree itself for "."), with the working tree's native kernels."""
    if revision == ".":
        return ROOT
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    for built in (ROOT / "serve" / "backend" / "native").glob("*.so"):
        shutil.copy2(built, into / "serve" / "backend" / "native" / built.name)
    return into


@contextlib.contextmanager
def served(store: Path, name: str, tree: Path) -> Iterator[tuple[str, int]]:
    """The inference URL of the MLP on a serve started from `tree`, and its process id."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(tree)  # serving() starts `python -m serve.cli.main` with this environment
    try:
        with serving(store, name, ["max_request_size=20000000", "job_queue_size=1000"]) as (ports, process):
            register(ports, "mlp")
            yield f"http://127.0.0.1:{ports['inference']}/predictions/mlp", process.pid
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def measure(revisions: list[str], rounds: int, seconds: int, conc: int) -> dict[str, list[tuple[float, ...]]]:
    store, payloads = OUT / "store", OUT / "payloads"
    build_archives(store)
    write_payloads(payloads)
    body, ctype = payloads / BODIES["json"][0], BODIES["json"][1]
    rows: dict[str, list[tuple[float, ...]]] = {r: [] for r in revisions}
    with tempfile.TemporaryDirectory(prefix="rest_cpu_") as tmp, contextlib.ExitStack() as stack:
        targets = {}
        for i, revision in enumerate(revisions):
            tree = checkout(revision, Path(tmp) / str(i))
            url, pid = stack.enter_context(served(store, f"rest_cpu_{i}", tree))
            wrk(url, body, ctype, 8, 3)  # warm-up
            targets[revision] = (url, pid, children(pid))
        for r in range(rounds):
            for revision in revisions if r % 2 == 0 else revisions[::-1]:
                url, pid, workers = targets[revision]
                server0, workers0 = cpu_seconds(pid), sum(map(cpu_seconds, workers))
                result = wrk(url, body, ctype, conc, seconds)
                server1, workers1 = cpu_seconds(pid), sum(map(cpu_seconds, workers))
                n = result["requests"]
                load = os.getloadavg()[0]
                row = (result["rps"], (server1 - server0) / n * 1e3, (workers1 - workers0) / n * 1e3, load)
                rows[revision].append(row)
                print(
                    f"{revision:>12} {row[0]:7.0f} req/s  server {row[1]:.4f}  worker {row[2]:.4f} ms/req  "
                    f"load {row[3]:.1f}",
                    flush=True,
                )
    return rows


def table(rows: dict[str, list[tuple[float, ...]]], command: str, rounds: int, seconds: int, conc: int) -> str:
    first = next(iter(rows))
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")), "?")
    loads = [row[3] for rs in rows.values() for row in rs]
    lines = [
        f"`{command}` on {datetime.date.today().isoformat()}: {model}, {os.cpu_count()} CPUs shared by server, worker "
        f"and wrk; wrk -t1 -c{conc}, {rounds} rounds of {seconds} s blocks per revision, alternated; load average "
        f"{min(loads):.1f}-{max(loads):.1f} during the blocks. Medians; the ratios are medians of per-round ratios "
        f"to {first}.",
        "",
        "| revision | server CPU ms/req | worker CPU ms/req | server / first | worker / first | req/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for revision, rs in rows.items():
        ratio = [statistics.median(x[i] / y[i] for x, y in zip(rs, rows[first], strict=True)) for i in (1, 2)]
        lines.append(f"| {revision} | {statistics.median(x[1] for x in rs):.3f} | "
                     f"{statistics.median(x[2] for x in rs):.3f} | {ratio[0]:.2f} | {ratio[1]:.2f} | "
                     f"{statistics.median(x[0] for x in rs):.0f} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("revisions", nargs="*", default=["."], help="git revisions; '.' is the working tree")
    parser.add_argument("--rounds", type=int, default=8, help="blocks per revision")
    parser.add_argument("--seconds", type=int, default=4, help="length of one block")
    parser.add_argument("--conc", type=int, default=32, help="wrk connections")
    parser.add_argument("--write", action="store_true", help="replace the CPU table in bench/RESULTS.md")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench/rest_cpu.py needs wrk (Debian: apt-get install wrk)")
    rows = measure(args.revisions, args.rounds, args.seconds, args.conc)
    text = table(rows, "python bench/rest_cpu.py " + " ".join(sys.argv[1:]), args.rounds, args.seconds, args.conc)
    print(text)
    if args.write:
        old = RESULTS.read_text()
        if BEGIN not in old:
            sys.exit(f"bench/RESULTS.md has no {BEGIN} block: add one where the table belongs")
        head, _, rest = old.partition(BEGIN)
        RESULTS.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.partition(END)[2]}")


if __name__ == "__main__":
    main()
