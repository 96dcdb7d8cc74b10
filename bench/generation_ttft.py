"""Engine settings side by side on real servers: time to first token, ITL and tokens/s of a burst, per setting.

    .venv/bin/python bench/generation_ttft.py --setting fcfs '{}' --setting paced '{"prefill_step_cost": 32}'

bench/generation.py's model folder, archive and server (`start_server`) and its streaming client (`run_level`),
one server per setting, all up at once (an idle one waits on its queue); each level (`--concurrency`, every client
sending one request: a burst) runs on each server in turn, the order alternating round by round, so a shared
machine's load falls on every setting alike. Medians over the rounds, and each round's tokens/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import generation as g
from generation_client import run_level
from generation_torch import prompts

KEYS = ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(g.SIZES), default="gpt2")
    p.add_argument("--setting", nargs=2, action="append", metavar=("NAME", "JSON"), required=True,
                   help="a name, and the handler settings it changes from bench/generation.py's")  # fmt: skip
    p.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    family, settings = args.model, {name: json.loads(js) for name, js in args.setting}
    folder = g.make_folder(family)
    vocab = g.SIZES[family][1]["vocab_size"]
    max_len = int(g.SIZES[family][1].get("n_positions") or g.SIZES[family][1]["max_position_embeddings"])
    print(f"{family}, load {os.getloadavg()[0]:.1f}", flush=True)
    servers: dict[str, Any] = {}
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {(n, c): [] for n in settings for c in args.concurrency}
    try:
        for name, over in settings.items():
            engine = {**g.engine_settings(family, max_len, 2**30, "float32"), **over}
            servers[name] = g.start_server(folder, family, engine, args.threads, f"ttft-{name}")
            asyncio.run(run_level(servers[name].ports["inference"], family, prompts(2, args.prompt, vocab, 99), 2, 8))
        for r in range(args.rounds):
            order = list(settings) if r % 2 == 0 else list(settings)[::-1]
            for c in args.concurrency:
                for name in order:
                    port = servers[name].ports["inference"]
                    level = asyncio.run(run_level(port, family, prompts(c, args.prompt, vocab, seed=r), c, args.new))
                    summary = level.summary()
                    runs[(name, c)].append(summary)
                    line = ", ".join(f"{k} {summary[k]:.1f}" for k in KEYS)
                    print(f"  round {r + 1} c{c} {name}: {line}", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    print(f"load after {os.getloadavg()[0]:.1f}\n")
    print("| concurrency | setting | tokens/s (rounds) | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for c in args.concurrency:
        for name in settings:
            rs = runs[(name, c)]
            med = {k: statistics.median(x[k] for x in rs) for k in KEYS}
            each = ", ".join(f"{x['tokens_per_s']:.0f}" for x in rs)
            print(f"| {c} | {name} | {med['tokens_per_s']:.1f} ({each}) | {med['ttft_p50_ms']:.0f} | "
                  f"{med['ttft_p99_ms']:.0f} | {med['itl_p50_ms']:.1f} | {med['itl_p99_ms']:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
