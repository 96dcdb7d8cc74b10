"""Time serve.generation.sampler.sample per step: rows 1/16/64 x vocab 32k/50k/152k, one sampling mode per column.

Logits are LM-like (a row of noise N(0, 2) with a few tokens lifted well above it, as a trained model's next-token
distribution has: top_p 0.9 needs tens to hundreds of tokens), float32 as a decoder returns them. Each cell is the
median of `--repeats` timed calls of `sample` over the same logits, each call with fresh per-row Generators drawn
outside the timing. "top_p flat" is the worst case of top_p: noise only, where 0.9 of the mass takes most of the
vocabulary.

Modes: greedy (temperature 0), temperature (1.0), top_p (0.9), top_p flat (0.9 on noise only), top_k (50), min_p
(0.05), penalties (temperature 1, repetition 1.1, presence 0.5, frequency 0.3 over a 1000-token history), logprobs
(temperature 1, top_p 0.9, logprobs 5).

Usage: python bench/sampler.py [--rows 1 16 64] [--vocab 32000 50257 151936] [--repeats 9] [--compare PATH]
(--compare: each cell as "before -> after", before being another copy of sampler.py (e.g. `git show
REV:serve/generation/sampler.py > /tmp/old.py`) loaded from its file and timed in alternation with serve's, so that
the machine's drift hits both alike.)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from types import ModuleType

import numpy as np

from serve.generation import sampler as current_sampler
from serve.generation.sampling_params import SamplingParams

EOS = frozenset({0})
MODES: dict[str, dict] = {
    "greedy": dict(temperature=0.0),
    "temperature": dict(temperature=1.0),
    "top_p": dict(top_p=0.9),
    "top_p flat": dict(top_p=0.9),
    "top_k": dict(top_k=50),
    "min_p": dict(min_p=0.05),
    "penalties": dict(repetition_penalty=1.1, presence_penalty=0.5, frequency_penalty=0.3),
    "logprobs": dict(top_p=0.9, logprobs=5),
}


@dataclass
class Row:
    params: SamplingParams
    token_ids: list[int]
    num_prompt_tokens: int
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))


def lm_logits(rows: int, vocab: int, flat: bool, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 2.0, (rows, vocab)).astype(np.float32)  # (rows, vocab)
    if not flat:
        for r in range(rows):  # a few likely tokens well above the noise
            lifted = rng.choice(vocab, 40, replace=False)
            x[r, lifted] += rng.uniform(8.0, 16.0, 40).astype(np.float32)
    return x


def load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("sampler_under_test", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def time_modes(modules: list[ModuleType], mode: str, rows: int, vocab: int, repeats: int) -> list[float]:
    """The median ms per call of each module's `sample`, the modules taking turns on every repeat."""
    logits = lm_logits(rows, vocab, flat=mode == "top_p flat")
    params = SamplingParams(**MODES[mode])
    history = np.random.default_rng(1).integers(0, vocab, 1000).tolist()
    times: list[list[float]] = [[] for _ in modules]
    for rep in range(repeats + 1):
        for m, module in enumerate(modules):
            batch = [Row(params, history, 500, np.random.default_rng(rep * 1000 + i)) for i in range(rows)]
            start = time.perf_counter()
            module.sample(logits, batch, EOS)
            if rep:  # the first call warms up
                times[m].append(time.perf_counter() - start)
    return [statistics.median(t) * 1e3 for t in times]


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--vocab", type=int, nargs="+", default=[32000, 50257, 151936])
    parser.add_argument("--modes", nargs="+", default=list(MODES))
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--compare", default=None, help="path of another sampler.py to time before serve's")
    args = parser.parse_args()
    modules = ([load(args.compare)] if args.compare else []) + [current_sampler]
    what = "before -> after" if args.compare else "serve's"
    print(f"sample() ms per step ({what}), median of {args.repeats}; numpy {np.__version__}, {cpu_name()}, "
          f"{os.cpu_count()} cores")  # fmt: skip
    print("| rows x vocab | " + " | ".join(args.modes) + " |")
    print("|---|" + "---:|" * len(args.modes))
    for vocab in args.vocab:
        for rows in args.rows:
            cells = [time_modes(modules, m, rows, vocab, args.repeats) for m in args.modes]
            text = [" -> ".join(f"{t:.2f}" for t in c) for c in cells]
            print(f"| {rows} x {vocab} | " + " | ".join(text) + " |", flush=True)


if __name__ == "__main__":
    main()
