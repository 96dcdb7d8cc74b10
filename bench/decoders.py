"""Decode step time of serve's decoder families against transformers + torch eager, on one random checkpoint.

    .venv/bin/python bench/decoders.py                       # GPT-2 small (124M), batch 1 and 16, 2 threads
    .venv/bin/python bench/decoders.py --family llama --batch 1 4 16 --rounds 5

A random checkpoint of the family is saved once by transformers (`save_pretrained`, safetensors, into bench/out/);
then each side runs in its own process, with the same thread count (OMP/OpenBLAS/MKL variables and
torch.set_num_threads), on the same prompts: B sequences of `--prompt` tokens are prefilled, then `--steps` decode
steps of one token per sequence are timed one by one. serve runs `load_pretrained(folder).step` over a paged KV
cache of 16-token blocks (what the engine will hand it); transformers runs the model's forward with its
DynamicCache (`past_key_values`), the way `generate` decodes, without generate's Python around it. The figure is
the median step time, and tokens per second (batch / median step time). Sides: serve with float32 weights (the
numbers transformers gives, within 1e-4), serve with bfloat16 weights (dtype="bfloat16", where the CPU has
AVX512-BF16), serve with weight-only int8 products (quantization="int8"), transformers + torch eager in float32. A
shared machine's load moves every figure, so the sides run in turn, `--rounds` times, and the table gives the median
over rounds of each side's median step (and the range).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIDES = {"serve": "serve fp32", "serve-bf16": "serve bf16", "serve-int8": "serve int8", "torch": "transformers"}
OUT = ROOT / "bench" / "out" / "decoders"
SIZES = {
    "gpt2": ("GPT2Config", dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024)),
    "llama": ("LlamaConfig", dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                                  num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=2048)),
}  # fmt: skip


def make_checkpoint(family: str) -> Path:
    folder = OUT / family
    if (folder / "config.json").is_file():
        return folder
    import torch

    sys.modules.setdefault("torchvision._meta_registrations", type(sys)("torchvision._meta_registrations"))
    import transformers

    cls, kwargs = SIZES[family]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, cls)(**kwargs))
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def run_serve(folder: Path, batch: int, prompt: int, steps: int, dtype: str = "float32",
              quantization: str | None = None) -> list[float]:  # fmt: skip
    import numpy as np

    from serve.zoo.decoders import KVCache, StepBatch, load_pretrained

    decoder = load_pretrained(folder, dtype=dtype, quantization=quantization)
    bs, per_seq = 16, -(-(prompt + steps + 1) // 16)
    cache = KVCache(decoder.spec, batch * per_seq, bs)
    tables = np.arange(batch * per_seq, dtype=np.int32).reshape(batch, per_seq)
    rng = np.random.default_rng(0)

    def step(lens: np.ndarray, new: int) -> np.ndarray:
        pos = np.concatenate([np.arange(n - new, n) for n in lens])
        seq = np.repeat(np.arange(batch), new)
        slots = tables[seq, pos // bs].astype(np.int64) * bs + pos % bs
        starts = np.arange(batch + 1, dtype=np.int64) * new
        ids = rng.integers(0, decoder.spec.vocab_size, batch * new)
        b = StepBatch(ids, pos, starts, lens, tables, slots, starts[1:] - 1)
        return decoder.step(b, cache)

    lens = np.full(batch, prompt, np.int64)
    step(lens, prompt)
    times = []
    for _ in range(steps):
        lens = lens + 1
        t0 = time.perf_counter()
        step(lens, 1)
        times.append(time.perf_counter() - t0)
    return times


def run_torch(folder: Path, batch: int, prompt: int, steps: int) -> list[float]:
    import torch

    sys.modules.setdefault("torchvision._meta_registrations", type(sys)("torchvision._meta_registrations"))
    import transformers

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    times = []
    with torch.no_grad():
        out = model(torch.randint(0, vocab, (batch, prompt), generator=g), use_cache=True)
        past = out.past_key_values
        for _ in range(steps):
            ids = torch.randint(0, vocab, (batch, 1), generator=g)
            t0 = time.perf_counter()
            out = model(ids, past_key_values=past, use_cache=True)
            times.append(time.perf_counter() - t0)
            past = out.past_key_values
    return times


def child(args: argparse.Namespace) -> None:
    folder = Path(args.folder)
    if args.side == "torch":
        times = run_torch(folder, args.one_batch, args.prompt, args.steps)
    else:
        dtype = "bfloat16" if args.side == "serve-bf16" else "float32"
        quantization = "int8" if args.side == "serve-int8" else None
        times = run_serve(folder, args.one_batch, args.prompt, args.steps, dtype, quantization)
    print(json.dumps(times))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", choices=sorted(SIZES), default="gpt2")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-bf16", action="store_true", help="leave out serve's bfloat16 side")
    p.add_argument("--no-int8", action="store_true", help="leave out serve's int8 side")
    p.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    p.add_argument("--one-batch", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.side:
        return child(args)
    folder = make_checkpoint(args.family)
    threads = str(args.threads)
    env = {**os.environ, "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    print(f"{args.family} (random, {folder}), prompt {args.prompt}, {args.steps} decode steps, {threads} threads, "
          f"{platform.processor() or platform.machine()}, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    sides = [s for s in SIDES if not (s == "serve-bf16" and args.no_bf16) and not (s == "serve-int8" and args.no_int8)]
    print(f"{'batch':>5} {'side':>13} {'median ms/step':>15} {'(range)':>15} {'tokens/s':>9}")
    for batch in args.batch:
        medians: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(args.rounds):
            for side in sides:
                cmd = [sys.executable, __file__, "--side", side, "--folder", str(folder), "--one-batch", str(batch),
                       "--prompt", str(args.prompt), "--steps", str(args.steps)]  # fmt: skip
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
                medians[side].append(statistics.median(json.loads(out.strip().splitlines()[-1])))
        for side, values in medians.items():
            m = statistics.median(values)
            spread = f"{min(values) * 1e3:.1f}-{max(values) * 1e3:.1f}"
            print(f"{batch:>5} {SIDES[side]:>13} {m * 1e3:>15.2f} {spread:>15} {batch / m:>9.1f}", flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
