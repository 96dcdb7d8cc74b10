"""bench/gpu.py kept from rotting without a GPU: its CPU smoke mode runs end to end and prints both tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu.py"


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def test_cpu_smoke_prints_model_and_kernel_tables(tmp_path):
    md = tmp_path / "bench.md"
    proc = _run("--device", "cpu", "--tiny", "--markdown", str(md))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = md.read_text()
    assert "torch.backends.cudnn.allow_tf32=" in text and "serve.backends.cudnn.allow_tf32=" in text
    for model in ("ResNet-50 32x32", "tiny BERT seq 16"):
        for dtype in ("float32", "float16"):
            row = next(line for line in text.splitlines() if line.startswith(f"| {model}") and f"| {dtype} |" in line)
            cells = [c.strip() for c in row.strip("|").split("|")]
            serve_ms, torch_ms, ratio, diff = (float(c) for c in cells[3:7])
            assert serve_ms > 0 and torch_ms > 0 and ratio > 0
            assert diff <= (1e-5 if dtype == "float32" else 1e-2), row
    for kernel in ("copy", "softmax", "layer_norm"):
        rows = [line for line in text.splitlines() if line.startswith(f"| {kernel} |")]
        assert len(rows) == 2 and all("error" not in r for r in rows), rows
    assert "error" not in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given on a machine without CUDA")
def test_cuda_mode_without_a_gpu_says_so():
    proc = _run("--no-models", "--no-kernels", timeout=120)
    assert proc.returncode != 0
    assert "CUDA" in proc.stderr and "--device cpu" in proc.stderr


def test_bad_arguments_are_refused():
    proc = _run("--device", "cpu", "--models", "resnet51", timeout=120)
    assert proc.returncode == 2 and "resnet51" in proc.stderr
