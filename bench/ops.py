"""Per-op overhead of serve vs PyTorch under no_grad on small tensors, measured in the same process.

    .venv/bin/python bench/ops.py            # prints a markdown table
    .venv/bin/python bench/ops.py --write    # also replaces the ops table in bench/RESULTS.md

Each op is timed in batches of calls with timeit, alternating serve and torch batch by batch so both see
the same machine load; the figure is the median over repeats, in microseconds per call. The ratio is
serve / torch: below 1 means serve's call is cheaper. Both run on the same inputs (copied from numpy).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import timeit
from pathlib import Path
from typing import Any

import numpy as np

import serve

try:
    import torch
except ImportError:
    sys.exit("bench/ops.py compares against PyTorch: install the test extra (pip install -e '.[test]')")

RESULTS = Path(__file__).with_name("RESULTS.md")
BEGIN, END = "<!-- ops:begin -->", "<!-- ops:end -->"


def _cases(lib: Any, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    t = {k: lib.from_numpy(v.copy()) for k, v in arrays.items()}
    a, b, m1, m2, x = t["a"], t["b"], t["m1"], t["m2"], t["x"]
    return {
        "add 8x8 + 8x8": lambda: a + b,
        "add 8x8 + scalar": lambda: a + 1.5,
        "mul 8x8 * 8 (broadcast)": lambda: a * t["row"],
        "matmul 64x64 @ 64x64": lambda: m1 @ m2,
        "softmax 8x8 (dim=-1)": lambda: a.softmax(-1),
        "softmax 4x128 (dim=-1)": lambda: x.softmax(-1),
        "relu 8x8": lambda: lib.relu(a),
        "sum 8x8 (dim=1)": lambda: a.sum(1),
        "reshape 8x8 -> 64": lambda: a.reshape(64),
        "index a[0]": lambda: a[0],
        "cat 2 x 8x8 (dim=0)": lambda: lib.cat([a, b], 0),
    }


def measure(number: int, repeats: int) -> list[tuple[str, float, float]]:
    rng = np.random.default_rng(0)
    arrays = {
        "a": rng.standard_normal((8, 8), dtype=np.float32),
        "b": rng.standard_normal((8, 8), dtype=np.float32),
        "row": rng.standard_normal(8, dtype=np.float32),
        "m1": rng.standard_normal((64, 64), dtype=np.float32),
        "m2": rng.standard_normal((64, 64), dtype=np.float32),
        "x": rng.standard_normal((4, 128), dtype=np.float32),
    }
    ours, theirs = _cases(serve, arrays), _cases(torch, arrays)
    rows = []
    with serve.no_grad(), torch.no_grad():
        for name in ours:
            s_times, t_times = [], []
            for _ in range(repeats):
                s_times.append(timeit.timeit(ours[name], number=number) / number * 1e6)
                t_times.append(timeit.timeit(theirs[name], number=number) / number * 1e6)
            rows.append((name, statistics.median(s_times), statistics.median(t_times)))
    return rows


def table(rows: list[tuple[str, float, float]], number: int, repeats: int) -> str:
    lines = [
        f"Per-op time under no_grad, median of {repeats} repeats of {number} calls, microseconds per call "
        f"(serve {serve.__version__}, torch {torch.__version__}, numpy {np.__version__}, "
        f"Python {platform.python_version()}, {torch.get_num_threads()} torch threads).",
        "",
        "| op | serve µs | torch µs | serve / torch |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {name} | {s:.2f} | {t:.2f} | {s / t:.2f} |" for name, s, t in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--number", type=int, default=2000, help="calls per timed batch")
    parser.add_argument("--repeats", type=int, default=15, help="timed batches per op and library")
    parser.add_argument("--write", action="store_true", help="replace the ops table in bench/RESULTS.md")
    args = parser.parse_args()
    text = table(measure(args.number, args.repeats), args.number, args.repeats)
    print(text)
    if args.write:
        old = RESULTS.read_text() if RESULTS.exists() else f"# Benchmark results\n\n{BEGIN}\n{END}\n"
        head, _, rest = old.partition(BEGIN)
        _, _, tail = rest.partition(END)
        RESULTS.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


if __name__ == "__main__":
    main()
