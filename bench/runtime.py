"""Model latency of serve (eager and optimized), PyTorch eager and ONNX Runtime on the same weights and inputs.

    .venv/bin/python bench/runtime.py                    # prints the markdown tables
    .venv/bin/python bench/runtime.py --load             # also times each library with one core taken by a busy loop
    .venv/bin/python bench/runtime.py --write            # also replaces the runtime table in bench/RESULTS.md
    .venv/bin/python bench/runtime.py --case ... --write --section matrix   # a table of its own (runtime-matrix)
    .venv/bin/python bench/runtime.py --profile "ResNet-18 b8"   # cProfile of serve on one case
    .venv/bin/python bench/runtime.py --case "ResNet-18 b8"      # time only that case (repeatable)

Each library runs in its own process (thread pools that spin steal each other's cores), all on 2 threads: serve
under no_grad on its CPU lanes (serve.set_num_threads), serve's inference plan (serve.inference.optimize), PyTorch
under inference_mode (torch.set_num_threads), ONNX Runtime with intra_op_num_threads=2 and inter_op 1. The parent
builds each case's torch twin with a fixed seed and writes its weights, inputs and ONNX export to a temporary
folder (bench/runtime_cases.py); the workers (bench/runtime_worker.py, started as `runtime.py --worker LIB`) load
those, warm up, and then time blocks of calls when told to, in rounds that alternate the libraries. A library's
figure is the median over rounds of its blocks' median call in milliseconds (tables: bench/runtime_report.py).
A column is "n/a" when its library is missing (onnxruntime: the `bench` extra; serve.inference) or cannot run the
case. GFLOP/s divide the model's FLOPs (2 * MACs of convolutions, linear layers and attention products, counted on
serve's model) by the time, against the fp32 GEMM peak measured in the same run: numpy's one-threaded OpenBLAS on
each of serve's 2 lanes, and torch.mm on 2 threads (2048^3 products, best of 5).
"""

from __future__ import annotations

import os

# the BLAS and OpenMP pools are sized when they load: the thread count is fixed before any import of numpy
THREADS = 2
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(THREADS)

import argparse  # noqa: E402
import contextlib  # noqa: E402
import datetime  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import runtime_cases as rc  # noqa: E402
import runtime_report as report  # noqa: E402
import runtime_worker as rw  # noqa: E402

SCRIPT = Path(__file__).resolve()
RESULTS = rc.ROOT / "bench" / "RESULTS.md"
BEGIN, END = "<!-- runtime:begin -->", "<!-- runtime:end -->"


class Worker:
    """One library's process for one case (or a GEMM peak): started, read until ready, told to time blocks."""

    def __init__(self, lib: str, case: rc.Case | None, folder: Path | None, warmup: int, log: Path) -> None:
        own_venv = lib.startswith("openvino") and rw.OPENVINO_PYTHON.exists()  # OpenVINO: bench-only, its own venv
        python = str(rw.OPENVINO_PYTHON) if own_venv else sys.executable
        argv = [python, str(SCRIPT), "--worker", lib, "--warmup", str(warmup)]
        if case is not None:
            argv += ["--case", case.name, "--cache", str(folder)]
        self.log = log
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                         cwd=rc.ROOT)  # fmt: skip
        self.info = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                return json.loads(line)
        lines = self.log.read_text(errors="replace").strip().splitlines() or ["no output"]
        return {"ready": False, "na": f"worker failed: {lines[-1][:200]}"}

    def block(self, calls: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{calls}\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def one_core_taken() -> Iterator[None]:
    """A busy-looping process pinned to the last CPU this process may use, for the duration."""
    spinner = subprocess.Popen([sys.executable, str(SCRIPT), "--worker", "spin"], cwd=rc.ROOT)
    try:
        with contextlib.suppress(AttributeError, OSError):  # pinning is Linux-only; unpinned it still takes a core
            os.sched_setaffinity(spinner.pid, {max(os.sched_getaffinity(0))})
        time.sleep(0.3)
        yield
    finally:
        spinner.kill()
        spinner.wait()


def gemm_peaks(log: Path) -> dict[str, float | None]:
    peaks: dict[str, float | None] = {}
    for lib in ("gemm-numpy", "gemm-torch"):
        w = Worker(lib, None, None, 0, log)
        peaks[lib] = w.info.get("gflops")
        w.close()
    return peaks


def measure(case: rc.Case, folder: Path, args: argparse.Namespace, log: Path) -> dict[str, dict[str, Any]]:
    """{lib: {"info": the worker's ready message, "idle": [ms per round], "load": [ms per round]}}."""
    # started one after the other: an inference plan that times kernels at load must not compete with a start
    workers = {lib: Worker(lib, case, folder, args.warmup, log) for lib in args.libs}
    out: dict[str, dict[str, Any]] = {lib: {"info": w.info, "idle": [], "load": []} for lib, w in workers.items()}
    live = [lib for lib, w in workers.items() if w.info.get("ready")]
    try:
        share = args.seconds / args.rounds / max(1, len(live)) / (2 if args.load else 1)
        calls = {lib: max(1, min(args.runs, int(share * 1e3 / workers[lib].info["ms"]))) for lib in live}
        for r in range(args.rounds):
            order = live[r % len(live) :] + live[: r % len(live)] if live else []
            for key in ("idle", "load") if args.load else ("idle",):
                with one_core_taken() if key == "load" else contextlib.nullcontext():
                    for lib in order:
                        if lib not in live:
                            continue
                        reply = workers[lib].block(calls[lib])
                        if "ms" in reply:
                            out[lib][key].append(reply["ms"])
                        else:  # the worker died: its column reads n/a from here on, with the reason in the notes
                            out[lib].update(info=reply, idle=[], load=[])
                            live.remove(lib)
    finally:
        for w in workers.values():
            w.close()
    return out


def worker_main(args: argparse.Namespace) -> None:
    if args.worker == "spin":
        return rw.spin()
    if args.worker.startswith("gemm"):
        return rw.gemm(args.worker, THREADS)
    case = rc.find(args.case[0] if args.case else "")
    with contextlib.ExitStack() as stack:
        cache = Path(args.cache) if args.cache else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        folder = rc.prepare(case, cache)
        if args.profile:
            return rw.profile(case, folder, THREADS, args.runs)
        rw.run(args.worker, case, folder, THREADS, args.warmup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of one block per library (median over them)")
    parser.add_argument("--runs", type=int, default=50, help="timed calls per block, at most")
    parser.add_argument("--seconds", type=float, default=20.0, help="timed seconds per case, about (>= 1 call)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls at each worker's start")
    parser.add_argument("--load", action="store_true", help="also time every block with one core busy-looping")
    parser.add_argument("--write", action="store_true", help="replace the runtime table in bench/RESULTS.md")
    parser.add_argument("--section", default="",
                        help="with --write: the table between <!-- runtime-SECTION:begin/end --> instead (made after "
                        "the runtime table when missing): a subset of cases and libraries")  # fmt: skip
    parser.add_argument("--profile", metavar="CASE", help="profile serve's eager calls on the case of this name")
    parser.add_argument("--case", action="append", help="time only the case of this name (repeatable)")
    parser.add_argument("--libs", nargs="+", default=list(rw.LIBS), choices=rw.LIBS, metavar="LIB",
                        help=f"the libraries to time (default all: {' '.join(rw.LIBS)})")  # fmt: skip
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # a child process: LIB (runtime_worker.py)
    parser.add_argument("--cache", help=argparse.SUPPRESS)  # the parent's folder of prepared cases
    args = parser.parse_args()
    if args.worker:
        return worker_main(args)
    if args.profile:
        rc.find(args.profile)
        sys.exit(subprocess.call([sys.executable, str(SCRIPT), "--worker", "serve", "--profile", args.profile,
                                  "--case", args.profile, "--runs", str(max(3, args.runs // 5))]))  # fmt: skip
    if importlib.util.find_spec("torch") is None:
        sys.exit("bench/runtime.py builds its cases from torch twins: pip install -e '.[test,bench]'")
    chosen = [rc.find(name) for name in args.case] if args.case else rc.CASES
    load = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="serve-runtime-bench-") as tmp:
        log = Path(tmp) / "workers.log"
        peaks = gemm_peaks(log)
        for case in chosen:
            folder = rc.prepare(case, Path(tmp))
            rows.append((case, measure(case, folder, args, log)))
            print(f"# {case.name}: " + report.summary(rows[-1][1]), file=sys.stderr, flush=True)
    command = "python bench/runtime.py " + " ".join(sys.argv[1:])
    meta = {"command": command.strip(), "date": datetime.date.today().isoformat(), "cpu": cpu_model(),
            "threads": THREADS, "python": platform.python_version(), "numpy": np.__version__,
            "cpus": os.cpu_count(), "load": load, "load_end": os.getloadavg()[0], "rounds": args.rounds}  # fmt: skip
    text = report.tables(rows, peaks, meta, args.load)
    print(text)
    if args.write:
        write_results(text, args.section)


def write_results(text: str, section: str) -> None:
    """Replace the runtime table (or section's) in bench/RESULTS.md with text."""
    begin, end = BEGIN, END
    if section:
        begin, end = f"<!-- runtime-{section}:begin -->", f"<!-- runtime-{section}:end -->"
    old = RESULTS.read_text() if RESULTS.exists() else f"# Benchmark results\n\n{BEGIN}\n{END}\n"
    if begin not in old:  # a new section goes after the runtime table
        head, _, tail = old.partition(END)
        old = f"{head}{END}\n\n{begin}\n{end}{tail}"
    head, _, rest = old.partition(begin)
    _, _, tail = rest.partition(end)
    RESULTS.write_text(f"{head}{begin}\n{text}\n{end}{tail}")


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
