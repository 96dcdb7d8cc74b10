"""What one pass of the inference plan buys on a transformers model, paired in one process: the model eager, planned
without the pass, and planned with every pass, called in turn, so the shared machine's load falls on all three alike.

    .venv/bin/python bench/plan_passes_ab.py gpt2 --without conv1d --rounds 6
    .venv/bin/python bench/plan_passes_ab.py bert --without conv1d

The model and its input are bench/transformers_speed.py's (GPT-2 124M causal LM, bert-base sequence classification;
batch 8, sequence 128, built and saved by the real transformers + torch), loaded on serve's torch alias in a child
process with 2 threads. Each plan is made and warmed (kernels timed) before the rounds; each round calls each
variant once. Prints the medians, each round's with / without, and each variant's largest difference from torch's
logits (relative to their largest value).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import transformers_speed  # noqa: E402  # the same models and inputs

CHILD = r"""
import os, statistics, sys, time
import numpy as np
folder, auto, without, rounds, root = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
sys.path.insert(0, root)
from serve.worker.torch_compat import install_torch_compat
install_torch_compat()
import torch, transformers
from serve.inference import optimize
from serve.inference.passes import PASSES
model = getattr(transformers, auto).from_pretrained(folder).eval()
inputs = {k: torch.from_numpy(np.load(f"{folder}/{k}.npy")) for k in ("input_ids", "attention_mask")}
ref = np.load(folder + "/reference.npy")
variants = {"eager": model, "without": optimize(model, passes=tuple(p for p in PASSES if p != without)),
            "with": optimize(model)}
times = {k: [] for k in variants}
print(f"load at start {os.getloadavg()[0]:.1f}")
with torch.no_grad():
    for k, m in variants.items():
        out = m(**inputs).logits.numpy()
        m(**inputs)
        err = float(np.abs(out - ref).max() / np.abs(ref).max())
        print(f"{k}: max rel diff {err:.1e}", m.describe()["passes"] if k != "eager" else "")
    for _ in range(rounds):
        for k, m in variants.items():
            t = time.perf_counter()
            m(**inputs)
            times[k].append(time.perf_counter() - t)
print(f"load at end {os.getloadavg()[0]:.1f}")
med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
print(" | ".join(f"{k} {med[k]:.0f} ms" for k in variants))
print(f"with / without {med['with'] / med['without']:.2f} (rounds: "
      + ", ".join(f"{a / b:.2f}" for a, b in zip(times["with"], times["without"])) + f"); with / eager "
      f"{med['with'] / med['eager']:.2f}; without / eager {med['without'] / med['eager']:.2f}")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=list(transformers_speed.MODELS))
    parser.add_argument("--without", default="conv1d", help="the pass left out of the 'without' plan")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / args.name
        folder.mkdir()
        transformers_speed.prepare(args.name, folder)
        auto = transformers_speed.MODELS[args.name][2]
        cmd = [sys.executable, "-c", CHILD, str(folder), auto, args.without, str(args.rounds), str(ROOT)]
        env = {**os.environ, "OMP_NUM_THREADS": "2"}
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
        if done.returncode:
            raise SystemExit(done.stderr[-3000:])
        print(done.stdout.strip())


if __name__ == "__main__":
    main()
