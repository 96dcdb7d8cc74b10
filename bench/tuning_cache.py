"""What the kernel choice cache (serve/inference/tuning.py) saves a worker: optimize and warm-up, first and next.

    .venv/bin/python bench/tuning_cache.py                 # ResNet-18, batch sizes 1-8, 2 later processes
    .venv/bin/python bench/tuning_cache.py --model resnet50 --later 3

Each run is a fresh process doing what a worker does at load (serve.zoo's model, `optimize`, then `warm` at every
batch size 1..8 with 224x224 inputs) against one empty temporary SERVE_TUNING_CACHE: the first times every layer's
kernels, the later ones find the choices kept. It prints seconds for optimize + warm-up and the chosen kernels'
agreement between the first process and the later ones (the cache must not change what runs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKER = """
import json, sys, time
import numpy as np
import serve
from serve import zoo
from serve.inference import optimize

model = getattr(zoo, sys.argv[1])().eval()
start = time.perf_counter()
opt = optimize(model)
for b in range(1, 9):
    x = serve.from_numpy(np.random.default_rng(b).standard_normal((b, 3, 224, 224)).astype(np.float32))
    opt.warm(x)
seconds = time.perf_counter() - start
choices = sorted(str(sorted(layer.choices.items())) for layer in opt.layers())
print(json.dumps({"seconds": seconds, "optimized": opt.optimized, "choices": choices}))
"""


def run(model: str, cache: Path) -> dict:
    env = {**os.environ, "SERVE_TUNING_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", WORKER, model], env=env, capture_output=True, text=True,
                         check=True, timeout=1800).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet18", help="a serve.zoo constructor (resnet18, resnet50, ...)")
    parser.add_argument("--later", type=int, default=2, help="processes after the first")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        first = run(args.model, Path(cache))
        later = [run(args.model, Path(cache)) for _ in range(args.later)]
    same = all(r["choices"] == first["choices"] for r in later)
    seconds = ", ".join(f"{r['seconds']:.2f}" for r in later)
    print(
        f"{args.model}, optimize + warm-up at batch sizes 1-8, seconds: first process {first['seconds']:.2f} "
        f"(times every layer), later processes {seconds} (choices kept); "
        f"same kernels chosen: {same}; optimized: {first['optimized'] and all(r['optimized'] for r in later)}"
    )


if __name__ == "__main__":
    main()
