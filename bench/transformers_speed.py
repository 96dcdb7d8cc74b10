"""Hugging Face transformers on serve vs on torch (issue 26 item 4): the same transformers code, the same weights,
one process per library.

    .venv/bin/python bench/transformers_speed.py                      # bert-base sequence classification, GPT-2
    .venv/bin/python bench/transformers_speed.py bert --rounds 3      # just one model

Each model is built by the real transformers + torch from its config (bert-base: 768 hidden, 12 layers, 3 labels;
GPT-2: the 124M config), seeded, and `save_pretrained` into a temporary folder with a seeded input (batch 8,
sequence 128). Then worker processes load it with `AutoModel...from_pretrained`:
    torch         transformers on the real torch, eager, under inference_mode
    serve-eager   transformers on serve's torch alias (installed as a torch-compat worker installs it), eager
    serve-plan    the same model through serve's inference plan (`serve.inference.optimize`), as the worker serves it
Each worker times `--seconds` of forward calls after 2 untimed ones, on 2 threads, and reports the median and its
largest difference from torch's logits (relative to their largest value). Rounds alternate the workers; the medians
of the rounds are compared, and each round's plan / torch is shown (the machine is shared: the spread says how much
its load moved the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BATCH, SEQ = 8, 128
MODELS = {  # name: (config class, config kwargs, auto class)
    "bert": ("BertConfig", {"num_labels": 3}, "AutoModelForSequenceClassification"),
    "gpt2": ("GPT2Config", {}, "AutoModelForCausalLM"),
}
MODES = ("torch", "serve-eager", "serve-plan")

WORKER = r"""
import json, statistics, sys, time
import numpy as np
mode, folder, auto, seconds, root = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
sys.path.insert(0, root)
ids, mask = np.load(folder + "/input_ids.npy"), np.load(folder + "/attention_mask.npy")
if mode == "torch":
    from tests.transformers_reference import reference_transformers
    transformers = reference_transformers()
    import torch
    torch.set_num_threads(2)
    grad_off = torch.inference_mode
else:
    from serve.worker.torch_compat import install_torch_compat
    install_torch_compat()
    import torch, transformers
    grad_off = torch.no_grad
model = getattr(transformers, auto).from_pretrained(folder).eval()
inputs = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
if mode == "serve-plan":
    from serve.inference import optimize
    model = optimize(model)
def call():
    with grad_off():
        return model(**inputs).logits.numpy()
out = call(); call()
times, start = [], time.perf_counter()
while len(times) < 3 or time.perf_counter() - start < seconds:
    t = time.perf_counter(); call(); times.append(time.perf_counter() - t)
ref = np.load(folder + "/reference.npy")
print(json.dumps({"ms": statistics.median(times) * 1e3, "calls": len(times),
                  "err": float(np.abs(out - ref).max() / np.abs(ref).max())}))
"""


def prepare(name: str, folder: Path) -> None:
    """The model saved by the real transformers, its seeded input, and torch's logits for it."""
    import torch

    sys.path.insert(0, str(ROOT))
    from tests.transformers_reference import reference_transformers

    transformers = reference_transformers()
    config_class, kwargs, auto = MODELS[name]
    torch.manual_seed(0)
    model = getattr(transformers, auto).from_config(getattr(transformers, config_class)(**kwargs)).eval()
    model.save_pretrained(folder)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1000, (BATCH, SEQ)).astype(np.int64)  # (B, T)
    mask = np.ones_like(ids)
    np.save(folder / "input_ids.npy", ids)
    np.save(folder / "attention_mask.npy", mask)
    with torch.inference_mode():
        logits = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits
    np.save(folder / "reference.npy", logits.numpy())


def run(mode: str, folder: Path, name: str, seconds: float) -> dict:
    cmd = [sys.executable, "-c", WORKER, mode, str(folder), MODELS[name][2], str(seconds), str(ROOT)]
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if done.returncode:
        raise RuntimeError(f"{mode} {name}: {done.stderr.strip().splitlines()[-3:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(MODELS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    lines = [f"`python bench/transformers_speed.py --rounds {args.rounds} --seconds {args.seconds:g}` on "
             f"{time.strftime('%Y-%m-%d')}, load average {os.getloadavg()[0]:.1f}: batch {BATCH}, sequence {SEQ}, "
             "2 threads each, each in its own process, medians of alternated rounds.", "",
             "| model | torch ms | serve eager ms | serve plan ms | eager / torch | plan / torch | plan / torch per "
             "round | max rel. diff |",
             "|---|---:|---:|---:|---:|---:|---|---:|"]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.names:
            folder = Path(tmp) / name
            folder.mkdir()
            prepare(name, folder)
            ms: dict[str, list[float]] = {mode: [] for mode in MODES}
            err = 0.0
            for _ in range(args.rounds):
                for mode in MODES:
                    got = run(mode, folder, name, args.seconds)
                    ms[mode].append(got["ms"])
                    err = max(err, got["err"]) if mode != "torch" else err
                    print(f"# {name} {mode}: {got['ms']:.1f} ms ({got['calls']} calls), err {got['err']:.1e}",
                          flush=True)  # fmt: skip
            t, e, p = (statistics.median(ms[mode]) for mode in MODES)
            rounds = ", ".join(f"{b / a:.2f}" for a, b in zip(ms["torch"], ms["serve-plan"]))  # the spread
            lines.append(f"| {name} | {t:.0f} | {e:.0f} | {p:.0f} | {e / t:.2f} | {p / t:.2f} | {rounds} | {err:.1e} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
