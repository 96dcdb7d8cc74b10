"""TorchServe's example files (tests/examples/torchserve/, copied unchanged from pytorch/serve), for the tests.

    src = example_files(tmp_path, "image_classifier/mnist")     # the folder copied into tmp_path
    module = torch_import(src / "mnist.py")                     # the model file on the real torch: the reference
    archive(store, "--model-name", "mnist", ...)                # serve's model-archiver, TorchServe's flags

The copy under tests/examples/torchserve/ is pytorch/serve at 62c4d6a (2025-03-17), Apache-2.0 (its LICENSE is
beside the files; the files carry no headers of their own). The tests read the files from a copy in their
tmp_path, as a user would from their checkout, so nothing they do can change the committed copy.
"""

from __future__ import annotations

import importlib.util
import io
import shutil
from pathlib import Path
from types import ModuleType

import numpy as np
from PIL import Image

from serve.cli.model_archiver import main as model_archiver

TORCHSERVE = Path(__file__).resolve().parent / "torchserve"


def example_files(dest: Path, folder: str) -> Path:
    """`examples/<folder>` of TorchServe copied to dest/<folder>; the copy's path."""
    target = dest / folder
    shutil.copytree(TORCHSERVE / folder, target)
    return target


def torch_import(path: Path) -> ModuleType:
    """The file imported with the real torch (and torchvision): the reference."""
    spec = importlib.util.spec_from_file_location(f"ref_ts_{path.parent.name}_{path.stem}".replace("-", "_"), path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def archive(store: Path, *argv: str) -> None:
    assert model_archiver([*argv, "--export-path", str(store)]) == 0


def image_bytes(seed: int, size: tuple[int, int], gray: bool = False, fmt: str = "JPEG") -> bytes:
    """A smooth seeded picture (it survives JPEG like a photo does), encoded; `size` is (width, height)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (5, 6) if gray else (5, 6, 3), dtype=np.uint8)
    image = Image.fromarray(small).resize(size, Image.Resampling.BICUBIC)
    buf = io.BytesIO()
    image.save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()
