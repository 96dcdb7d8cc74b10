"""Model latency of serve vs PyTorch eager on the same weights and inputs, both on 2 threads, in one process.

    .venv/bin/python bench/runtime.py                    # prints a markdown table
    .venv/bin/python bench/runtime.py --write            # also replaces the runtime table in bench/RESULTS.md
    .venv/bin/python bench/runtime.py --profile "ResNet-18 b8"   # cProfile of serve on one case
    .venv/bin/python bench/runtime.py --case "ResNet-18 b8"      # time only that case

serve runs under serve.no_grad() on its CPU lanes (serve.set_num_threads; numpy's OpenBLAS one thread in each),
PyTorch under torch.inference_mode() on its intra-op pool (torch.set_num_threads). Each case is warmed up,
then timed in 5 rounds of a serve block and a torch block (so both see the same machine load): `--runs` calls
per library, fewer where that would pass `--seconds`; the figure is the median call in milliseconds. The ratio
is serve / torch: below 1 means serve is faster. The torch models are the test suite's twins (tests/unit/zoo),
with the same weights.
"""

from __future__ import annotations

import os

# the BLAS pools are sized when numpy loads, so the thread count is fixed before any import of numpy
THREADS = 2
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(THREADS)

import argparse  # noqa: E402
import cProfile  # noqa: E402
import datetime  # noqa: E402
import platform  # noqa: E402
import pstats  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

import serve  # noqa: E402
from serve.zoo import MLP, all_minilm_l6_v2, resnet18  # noqa: E402

try:
    import torch
except ImportError:
    sys.exit("bench/runtime.py compares against PyTorch: install the test extra (pip install -e '.[test]')")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the torch twins live with the tests, so that there is one copy of each
from tests.unit.zoo import twins_text, twins_vision  # noqa: E402
from tests.unit.zoo.parity import copy_weights, randomize_norms  # noqa: E402

RESULTS = ROOT / "bench" / "RESULTS.md"
BEGIN, END = "<!-- runtime:begin -->", "<!-- runtime:end -->"
_PARK_S = 0.2  # seconds for an idle BLAS/OpenMP pool to stop spinning
Case = tuple[str, Callable[[], Any], Callable[[], Any], str]  # name, serve call, torch call, target


def _mlp_cases(rng: np.random.Generator) -> Iterator[Case]:
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).eval()
    ours = MLP(64, (128,), 10).eval()
    copy_weights(theirs, ours)
    for batch, target in ((1, "<= 1.0"), (64, "")):
        x = rng.standard_normal((batch, 64), dtype=np.float32)
        xs, xt = serve.from_numpy(x), torch.from_numpy(x.copy())
        yield f"MLP 64-128-10 b{batch}", partial(ours, xs), partial(theirs, xt), target


def _resnet_cases(rng: np.random.Generator) -> Iterator[Case]:
    torch.manual_seed(0)
    theirs = twins_vision.resnet18().eval()
    randomize_norms(theirs)
    ours = resnet18().eval()
    copy_weights(theirs, ours)
    for batch, target in ((1, ""), (8, "<= 1.5")):
        x = rng.standard_normal((batch, 3, 224, 224), dtype=np.float32)
        xs, xt = serve.from_numpy(x), torch.from_numpy(x.copy())
        yield f"ResNet-18 b{batch}", partial(ours, xs), partial(theirs, xt), target


def _minilm_cases(rng: np.random.Generator) -> Iterator[Case]:
    ours = all_minilm_l6_v2()[0].auto_model
    theirs = twins_text.minilm()
    for batch, target in ((1, ""), (8, "<= 1.5")):
        ids = rng.integers(1000, 30000, (batch, 128))
        mask = np.ones((batch, 128), dtype=np.int64)
        s_call = partial(ours, serve.from_numpy(ids), serve.from_numpy(mask))
        t_call = partial(theirs, torch.from_numpy(ids), torch.from_numpy(mask))
        yield f"MiniLM-L6 encoder b{batch} seq128", s_call, t_call, target


def cases() -> list[Case]:
    rng = np.random.default_rng(0)
    return [*_mlp_cases(rng), *_resnet_cases(rng), *_minilm_cases(rng)]


def _block(fn: Callable[[], Any], calls: int) -> list[float]:
    """Milliseconds of `calls` calls, after a pause and an untimed call.

    The other library's thread pool spins for a while after its last call and steals the 2 cores from this
    one's (alternating call by call makes a 30 µs MLP take 4 ms in both), so each block starts after it parks.
    """
    time.sleep(_PARK_S)
    fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def measure(case: Case, runs: int, seconds: float, warmup: int, rounds: int = 5) -> tuple[float, float]:
    """Median milliseconds per call of serve and of torch, timed in alternating blocks of calls."""
    _, ours, theirs, _ = case
    for _ in range(warmup):
        ours(), theirs()
    start = time.perf_counter()
    ours(), theirs()
    per_pair = time.perf_counter() - start
    calls = max(1, min(runs // rounds, int(seconds / rounds / per_pair)))
    s_times: list[float] = []
    t_times: list[float] = []
    for _ in range(rounds):
        s_times += _block(ours, calls)
        t_times += _block(theirs, calls)
    return statistics.median(s_times), statistics.median(t_times)


def table(rows: list[tuple[str, float, float, str]], command: str, load: float) -> str:
    lines = [
        f"`{command}` on {datetime.date.today().isoformat()}: median milliseconds per forward call "
        f"(serve {serve.__version__} under no_grad on numpy {np.__version__}; torch {torch.__version__} under "
        f"inference_mode; {THREADS} threads each; Python {platform.python_version()}; "
        f"{os.cpu_count()} CPUs, 1-minute load average {load:.1f} at the start).",
        "",
        "| model | serve ms | torch ms | serve / torch | target |",
        "|---|---:|---:|---:|---|",
    ]
    lines += [f"| {name} | {s:.3f} | {t:.3f} | {s / t:.2f} | {target} |" for name, s, t, target in rows]
    return "\n".join(lines)


def profile(case: Case, calls: int) -> None:
    """cProfile of serve's calls on one case, top functions by own time."""
    case[1]()
    prof = cProfile.Profile()
    with serve.no_grad():
        prof.runcall(lambda: [case[1]() for _ in range(calls)])
    pstats.Stats(prof).sort_stats("tottime").print_stats(20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="timed calls per case and library, at most")
    parser.add_argument("--seconds", type=float, default=10.0, help="time budget per case (>= 1 call a round)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls per case and library")
    parser.add_argument("--write", action="store_true", help="replace the runtime table in bench/RESULTS.md")
    parser.add_argument("--profile", metavar="CASE", help="profile serve on the case of this name instead")
    parser.add_argument("--case", action="append", help="time only the case of this name (repeatable)")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    serve.set_num_threads(THREADS)
    all_cases = [c for c in cases() if not args.case or c[0] in args.case]
    if args.profile:
        chosen = [c for c in all_cases if c[0] == args.profile]
        if not chosen:
            sys.exit(f"no case {args.profile!r}; cases: {', '.join(c[0] for c in all_cases)}")
        return profile(chosen[0], max(3, args.runs // 5))
    load = os.getloadavg()[0]
    rows = []
    with serve.no_grad(), torch.inference_mode():
        for case in all_cases:
            rows.append((case[0], *measure(case, args.runs, args.seconds, args.warmup), case[3]))
    command = "python bench/runtime.py " + " ".join(sys.argv[1:])
    text = table(rows, command.strip(), load)
    print(text)
    if args.write:
        old = RESULTS.read_text() if RESULTS.exists() else f"# Benchmark results\n\n{BEGIN}\n{END}\n"
        head, _, rest = old.partition(BEGIN)
        _, _, tail = rest.partition(END)
        RESULTS.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


if __name__ == "__main__":
    main()
