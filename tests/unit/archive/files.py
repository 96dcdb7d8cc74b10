"""Helpers for the archive tests: a model's source files in a tmp dir, TorchServe's own packager, file trees.

`sources(tmp)` writes what a user passes to model-archiver (model file, weights, handler, extra files with the
directories torch-model-archiver skips, a model-config, requirements). `torch_archive(...)` runs
torch-model-archiver 0.12 in-process on the same arguments (None when it is not installed). `tree(dir)` maps
every file below a directory to its bytes, to compare archives and to prove nothing was written elsewhere.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    from model_archiver.model_archiver_config import ModelArchiverConfig
    from model_archiver.model_packaging import generate_model_archive
except ImportError:  # the reference packager is a test extra
    generate_model_archive = None

needs_model_archiver = pytest.mark.skipif(
    generate_model_archive is None, reason="torch-model-archiver (model_archiver) is not installed"
)

CONFIG_YAML = """\
minWorkers: 1
batchSize: 4
handler:
  topk: 3
"""


@dataclass
class Sources:
    dir: Path
    model_file: Path
    serialized_file: Path
    handler: Path
    extra_dir: Path
    index: Path
    config_file: Path
    requirements_file: Path


def sources(tmp: Path) -> Sources:
    src = tmp / "src"
    (src / "extra" / "sub").mkdir(parents=True)
    for skipped in ("__pycache__", ".git", "__MACOSX"):
        (src / "extra" / skipped).mkdir()
        (src / "extra" / skipped / "junk.txt").write_text("should not be packed")
    (src / "extra" / "sub" / "__pycache__").mkdir()
    (src / "extra" / "sub" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (src / "extra" / "vocab.txt").write_text("a\nb\n")
    (src / "extra" / "sub" / "labels.txt").write_text("cat\ndog\n")
    (src / "extra" / ".hidden_file").write_text("kept: only directories are filtered")
    files = Sources(
        dir=src,
        model_file=src / "model.py",
        serialized_file=src / "weights.pt",
        handler=src / "my_handler.py",
        extra_dir=src / "extra",
        index=src / "index_to_name.json",
        config_file=src / "model-config.yaml",
        requirements_file=src / "requirements.txt",
    )
    files.model_file.write_text("from serve import nn\n\n\nclass Net(nn.Module):\n    pass\n")
    files.serialized_file.write_bytes(bytes(range(256)) * 40)
    files.handler.write_text("def handle(data, context):\n    return data\n")
    files.index.write_text('{"0": "zero", "1": "one"}')
    files.config_file.write_text(CONFIG_YAML)
    files.requirements_file.write_text("numpy\n")
    return files


def unique_name(prefix: str = "m") -> str:
    """torch-model-archiver stages files in /tmp/<model-name>: unique names keep parallel runs apart."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def torch_archive(export: Path, **kwargs: object) -> Path:
    """Run torch-model-archiver in-process with `kwargs` as ModelArchiverConfig fields; the output path."""
    export.mkdir(parents=True, exist_ok=True)
    fields = {k: (str(v) if isinstance(v, Path) else v) for k, v in kwargs.items()}
    config = ModelArchiverConfig(export_path=str(export), **fields)  # type: ignore[arg-type]
    generate_model_archive(config)
    suffix = {"default": ".mar", "zip-store": ".mar", "tgz": ".tar.gz", "no-archive": ""}
    return export / f"{config.model_name}{suffix[config.archive_format]}"


def tree(root: Path) -> dict[str, bytes]:
    """Every file below `root` (relative '/'-path -> bytes); symlinks listed with their target, not followed."""
    out: dict[str, bytes] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = b"-> " + str(p.readlink()).encode()
        elif p.is_file():
            out[rel] = p.read_bytes()
    return out
