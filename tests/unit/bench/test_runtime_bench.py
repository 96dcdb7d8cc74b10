"""bench/runtime.py's helpers: FLOP counting by hooks, the report's tables with missing columns, one worker's run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import serve
from serve.zoo import MLP

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
import runtime_cases as rc  # noqa: E402
import runtime_report as report  # noqa: E402


def _flops(model, *shapes):
    return rc.count_flops(model.eval(), tuple(serve.randn(*s) for s in shapes))


def test_flops_of_linears_and_convs():
    assert _flops(MLP(64, (128,), 10), (3, 64)) == 2 * 3 * (64 * 128 + 128 * 10)
    conv = serve.nn.Conv2d(4, 8, 3, padding=1, groups=2)
    assert _flops(conv, (2, 4, 5, 5)) == 2 * (2 * 8 * 5 * 5) * (4 // 2) * 9


def test_flops_of_an_encoder_layer():
    n, s, d, ff = 2, 7, 16, 32
    layer = serve.nn.TransformerEncoderLayer(d, 4, ff, batch_first=True)
    projections, products, feed_forward = 2 * n * s * 4 * d * d, 2 * 2 * n * s * s * d, 2 * 2 * n * s * d * ff
    assert _flops(layer, (n, s, d)) == projections + products + feed_forward


def _result(ms, load=None, **info):
    return {"info": {"ready": ms is not None, **info}, "idle": [] if ms is None else [ms, ms + 2, ms - 1],
            "load": load or []}  # fmt: skip


def test_tables_print_n_a_for_missing_libraries():
    case = rc.Case("Tiny b1", "mlp", 1, "<= 1.0")
    result = {"serve": _result(10.0, [20.0], flops=2 * 10**9, err=1e-7), "torch": _result(20.0, [60.0], err=0.0),
              "serve-opt": _result(None, na="serve.inference not importable"),
              "ort": _result(None, na="onnxruntime is not installed")}  # fmt: skip
    meta = {"command": "python bench/runtime.py", "date": "2026-01-01", "cpu": "CPU", "cpus": 2, "load": 0.5,
            "python": "3.11", "numpy": "2", "rounds": 3, "threads": 2}  # fmt: skip
    text = report.tables([(case, result)], {"gemm-numpy": 100.0, "gemm-torch": None}, meta, load=True)
    rows = [line for line in text.splitlines() if line.startswith("| Tiny b1")]
    assert rows[0] == "| Tiny b1 | 10.00 | n/a | 20.00 | n/a | n/a | n/a | 0.50 | <= 1.0 |"
    assert rows[1] == "| Tiny b1 | 2 | 200.0 (200%) | n/a | 100.0 (100%) | n/a |"
    assert rows[2] == "| Tiny b1 | 10.00 -> 20.00 (2.00x) | n/a | 20.00 -> 60.00 (3.00x) | n/a | 0.67 |"
    assert "serve.inference not importable" in text and "onnxruntime is not installed" in text


def test_worker_times_blocks_on_request():
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "runtime.py"), "--worker", "serve", "--case",
                           "MLP 64-128-10 b1"], input="3\n2\n", capture_output=True, text=True, cwd=ROOT,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    ready, *blocks = (json.loads(line) for line in proc.stdout.splitlines())
    assert ready["ready"] and ready["flops"] == 2 * (64 * 128 + 128 * 10) and ready["err"] < 1e-5
    assert len(blocks) == 2 and all(b["ms"] > 0 and b["min"] <= b["ms"] for b in blocks)
