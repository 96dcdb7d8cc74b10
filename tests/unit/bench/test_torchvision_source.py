"""bench/torchvision_source.py's loader: torchvision's own model file, run on serve with `import torch` resolved
to serve, loads torchvision's state_dict and gives its logits; the real torch/torchvision stay untouched."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tests.torchvision_reference import needs_torchvision, reference_torchvision

ROOT = Path(__file__).resolve().parents[3]


def bench_module():
    path = ROOT / "bench" / "torchvision_source.py"
    spec = importlib.util.spec_from_file_location("h1_torchvision_source_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_torchvision
def test_a_small_architecture_from_torchvision_source_matches_torchvision():
    bench, tv = bench_module(), reference_torchvision()
    source = bench.TorchvisionSource(Path(tv.__file__).parent, tv.transforms.InterpolationMode)
    status, note, rel = bench.run_one(tv, source, "mobilenet_v3_small", max_gflops=40)
    assert (status, note) == ("ok", "same top-1") and rel < 1e-4
    loaded = source.modules["torchvision.models.mobilenetv3"]
    assert loaded.torch.cat is sys.modules["serve"].cat  # the file's `import torch` is serve
    assert sys.modules["torchvision"] is tv and sys.modules.get("torchvision.models.mobilenetv3") is not loaded
    assert bench.run_one(tv, source, "vit_h_14", max_gflops=40)[0] == "skip"
