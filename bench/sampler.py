"""Time serve.generation.sampler.sample per step: rows 1/16/64 x vocab 32k/50k/152k, one sampling mode per column.

Logits are LM-like (a row of noise N(0, 2) with a few tokens lifted well above it, as a trained model's next-token
distribution has: top_p 0.9 needs tens to hundreds of tokens), float32 as a decoder returns them. Each cell is the
median of `--repeats` timed calls of `sample` over the same logits, each call with fresh per-row Generators drawn
outside the timing. "top_p flat" is the worst case of top_p: noise only, where 0.9 of the mass takes most of the
vocabulary.

Modes: greedy (temperature 0), temperature (1.0), top_p (0.9), top_p flat (0.9 on noise only), top_k (50), min_p
(0.05), penalties (temperature 1, repetition 1.1, presence 0.5, frequency 0.3 over a 1000-token history), logprobs
(temperature 1, top_p 0.9, logprobs 5).

Usage: python bench/sampler.py [--rows 1 16 64] [--vocab 32000 50257 151936] [--repeats 9] [--module PATH]
(--module: time another copy of sampler.py, e.g. the one before a change, loaded from its file.)
"""

from __future__ import annotations

import argparse
import importlib.util
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


def load(path: str | None) -> ModuleType:
    if path is None:
        return current_sampler
    spec = importlib.util.spec_from_file_location("sampler_under_test", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def time_mode(module: ModuleType, mode: str, rows: int, vocab: int, repeats: int) -> float:
    logits = lm_logits(rows, vocab, flat=mode == "top_p flat")
    params = SamplingParams(**MODES[mode])
    history = np.random.default_rng(1).integers(0, vocab, 1000).tolist()
    times = []
    for rep in range(repeats + 1):
        batch = [Row(params, history, 500, np.random.default_rng(rep * 1000 + i)) for i in range(rows)]
        start = time.perf_counter()
        module.sample(logits, batch, EOS)
        if rep:  # the first call warms up
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--vocab", type=int, nargs="+", default=[32000, 50257, 151936])
    parser.add_argument("--modes", nargs="+", default=list(MODES))
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--module", default=None, help="path of a sampler.py to time instead of serve's")
    args = parser.parse_args()
    module = load(args.module)
    print(f"sample() ms per step, median of {args.repeats}; numpy {np.__version__}, {platform.processor() or ''}")
    print("| rows x vocab | " + " | ".join(args.modes) + " |")
    print("|---|" + "---:|" * len(args.modes))
    for vocab in args.vocab:
        for rows in args.rows:
            cells = [f"{time_mode(module, m, rows, vocab, args.repeats):.2f}" for m in args.modes]
            print(f"| {rows} x {vocab} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
