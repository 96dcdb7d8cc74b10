"""Speed over torchvision's classification architectures (issue 16's geometric-mean target): serve's plan against
PyTorch eager, one architecture per family, batch 8 at each architecture's default input size.

    .venv/bin/python bench/torchvision_speed.py                    # the default list (one per family)
    .venv/bin/python bench/torchvision_speed.py resnet18 vgg11     # just these
    .venv/bin/python bench/torchvision_speed.py --write            # replace its table in bench/RESULTS.md

For each architecture the real torchvision (tests/torchvision_reference.py) builds the model (weights=None, seed 0,
eval) and its state_dict and a seeded input are saved; then two worker processes, one per library on 2 threads
(each library alone on the machine: spinning thread pools steal each other's cores), load them: PyTorch eager under
inference_mode, and serve.zoo's model of the same name (torchvision's keys, strict load) through the inference plan
(`serve.inference.optimize`, warmed on the input). Each worker times `--seconds` of calls after 2 untimed ones and
reports the median; the pair runs `--rounds` times alternated and the medians of the rounds are compared. The
geometric mean of serve / torch over the architectures is the figure the issue asks for.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ["resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2", "vgg11", "alexnet", "squeezenet1_1",
           "densenet121", "googlenet", "inception_v3", "mobilenet_v2", "mobilenet_v3_large", "mnasnet1_0",
           "shufflenet_v2_x1_0", "efficientnet_b0", "efficientnet_v2_s", "regnet_y_400mf", "regnet_x_1_6gf",
           "convnext_tiny", "vit_b_16", "swin_t", "maxvit_t"]  # fmt: skip
SIZES = {"inception_v3": 299}
BATCH = 8
MARK = ("<!-- tvspeed:begin -->", "<!-- tvspeed:end -->")

WORKER = r"""
import json, sys, time, statistics
import numpy as np
lib, folder, name, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
sys.path.insert(0, sys.argv[5])
x = np.load(folder + "/input.npy")
if lib == "torch":
    import torch
    torch.set_num_threads(2)
    from tests.torchvision_reference import reference_torchvision
    model = getattr(reference_torchvision().models, name)(weights=None).eval()
    model.load_state_dict(torch.load(folder + "/weights.pt", weights_only=True))
    xt = torch.from_numpy(x)
    def call():
        with torch.inference_mode():
            return model(xt).numpy()
else:
    import serve
    from serve.compat.torchvision import models
    from serve.inference import optimize
    model = getattr(models, name)(weights=None).eval()
    model.load_state_dict(serve.load(folder + "/weights.pt"), strict=True)
    xs = serve.from_numpy(x)
    with serve.no_grad():
        plan = optimize(model, (xs,))
    def call():
        with serve.no_grad():
            return plan(xs).numpy()
out = call(); call()
times, start = [], time.perf_counter()
while not times or time.perf_counter() - start < seconds:
    t = time.perf_counter(); call(); times.append(time.perf_counter() - t)
ref = np.load(folder + "/reference.npy")
print(json.dumps({"ms": statistics.median(times) * 1e3, "calls": len(times),
                  "err": float(np.abs(out - ref).max() / np.abs(ref).max())}))
"""


def prepare(name: str, folder: Path) -> None:
    import torch

    sys.path.insert(0, str(ROOT))
    from tests.torchvision_reference import reference_torchvision

    torch.manual_seed(0)
    model = getattr(reference_torchvision().models, name)(weights=None).eval()
    size = SIZES.get(name, 224)
    x = np.random.default_rng(0).standard_normal((BATCH, 3, size, size), dtype=np.float32)
    torch.save(model.state_dict(), folder / "weights.pt")  # as a user ships it: module versions (_metadata) kept
    np.save(folder / "input.npy", x)
    with torch.inference_mode():
        out = model(torch.from_numpy(x))
    np.save(folder / "reference.npy", (out.logits if hasattr(out, "logits") else out).numpy())


def run(lib: str, folder: Path, name: str, seconds: float) -> dict:
    cmd = [sys.executable, "-c", WORKER, lib, str(folder), name, str(seconds), str(ROOT)]
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if done.returncode:
        raise RuntimeError(f"{lib} {name}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=DEFAULT)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.names:
            folder = Path(tmp) / name
            folder.mkdir()
            prepare(name, folder)
            ms: dict[str, list[float]] = {"serve": [], "torch": []}
            err = 0.0
            try:
                for _ in range(args.rounds):
                    for lib in ("serve", "torch"):
                        got = run(lib, folder, name, args.seconds)
                        ms[lib].append(got["ms"])
                        err = max(err, got["err"]) if lib == "serve" else err
            except RuntimeError as e:  # reported, not counted in the mean
                print(f"# {name}: not timed: {e}", flush=True)
                continue
            s, t = statistics.median(ms["serve"]), statistics.median(ms["torch"])
            rows.append((name, s, t, err))
            print(f"# {name}: serve {s:.1f} ms, torch {t:.1f} ms, ratio {s / t:.2f}, err {err:.1e}", flush=True)
    text = report(rows, args)
    print(text)
    if args.write:
        write(text)


def report(rows: list[tuple[str, float, float, float]], args: argparse.Namespace) -> str:
    geo = math.exp(sum(math.log(s / t) for _, s, t, _ in rows) / len(rows))
    lines = [f"`python bench/torchvision_speed.py --rounds {args.rounds} --seconds {args.seconds:g}` on "
             f"{time.strftime('%Y-%m-%d')}: batch {BATCH}, 2 threads each, each library in its own process, medians "
             f"of {args.rounds} alternated rounds; serve = serve.zoo's model through the inference plan, PyTorch = "
             "torchvision's own model, eager, same weights.", "",
             "| architecture | serve ms | PyTorch ms | serve / torch | max rel. diff |",
             "|---|---:|---:|---:|---:|"]  # fmt: skip
    lines += [f"| {n} | {s:.1f} | {t:.1f} | {s / t:.2f} | {e:.1e} |" for n, s, t, e in rows]
    lines += ["", f"Geometric mean of serve / PyTorch over {len(rows)} architectures: **{geo:.2f}** (target <= 1.0)."]
    return "\n".join(lines)


def write(text: str) -> None:
    path = ROOT / "bench" / "RESULTS.md"
    content = path.read_text()
    block = f"{MARK[0]}\n{text}\n{MARK[1]}"
    if MARK[0] in content:
        head, rest = content.split(MARK[0], 1)
        content = head + block + rest.split(MARK[1], 1)[1]
    else:
        content += "\n## torchvision architectures: speed (issue: CPU speed)\n\n" + block + "\n"
    path.write_text(content)


if __name__ == "__main__":
    main()
