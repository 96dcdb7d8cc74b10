"""bench/perf_analyzer.py's pieces that need no perf_analyzer binary: its CSV parsed, the table with dropped runs,
the loader prefix, a binary that cannot start reported with its own error text, the archive's model-config."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# loaded under another name: `perf_analyzer` is also the wheel's package name
_spec = importlib.util.spec_from_file_location("perf_analyzer_bench", ROOT / "bench" / "perf_analyzer.py")
assert _spec is not None and _spec.loader is not None
pa = importlib.util.module_from_spec(_spec)
sys.modules["perf_analyzer_bench"] = pa
_spec.loader.exec_module(pa)

# a CSV as perf_analyzer 2.60.0 writes it (-f) against serve: no server-side columns (no statistics extension)
CSV = """Concurrency,Inferences/Second,Client Send,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency
1,245.741,155,0,2894,8013,9060,12576
"""


def _args(**kw: object) -> argparse.Namespace:
    base = {"max_concurrency": 2, "interval_ms": 1000, "max_trials": 8, "stability": 30, "rounds": 2}
    return argparse.Namespace(**{**base, **kw})


def test_parse_reads_rate_and_percentiles_in_ms(tmp_path: Path) -> None:
    (tmp_path / "c.csv").write_text(CSV)
    assert pa.parse(tmp_path / "c.csv") == {1: {"rate": 245.741, "p50": 2.894, "p90": 8.013, "p99": 12.576}}


def test_table_medians_ratio_and_dropped_runs() -> None:
    runs = pa.Runs()
    row = {"rate": 100.0, "p50": 1.0, "p90": 2.0, "p99": 3.0}
    runs.rows["http"][1] = [row, {**row, "rate": 300.0}]
    runs.rows["grpc"][1] = [{**row, "rate": 400.0}]
    runs.unstable["http"] = 2  # concurrency 2: no stable HTTP run, no gRPC run either
    args = _args()
    runs.options["http"] = pa.options_for("http", "127.0.0.1:1234", 2, Path("/tmp/x.csv"), args)
    text = pa.table(runs, "perf_analyzer x", args)
    assert "| 1 | 200 | 1.00 | 2.00 | 3.00 | 400 | 1.00 | 2.00 | 3.00 | 2.00 |" in text
    assert "| 2 | - | - | - | - | - | - | - | - | - |" in text
    assert "-u 127.0.0.1:<port> --concurrency-range <c>:<c>" in text and "-f <csv>" in text
    assert "HTTP 100%" in text and "http 2" in text


def test_launcher_runs_through_the_given_loader() -> None:
    assert pa.launcher(Path("/b/perf_analyzer"), None) == ["/b/perf_analyzer"]
    prefix = pa.launcher(Path("/b/perf_analyzer"), "/libs")
    assert prefix[0] == "/libs/ld-linux-x86-64.so.2" and prefix[-1] == "/b/perf_analyzer"
    assert prefix[1] == "--library-path" and prefix[2].startswith("/libs:")


def test_a_binary_that_cannot_start_is_reported_with_its_error(tmp_path: Path) -> None:
    fake = tmp_path / "perf_analyzer"
    fake.write_text("#!/bin/sh\necho \"version 'GLIBC_2.38' not found\" >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(RuntimeError, match=r"cannot run here .*GLIBC_2\.38"):
        pa.version([str(fake)], fake)


def test_archive_declares_the_tensors_perf_analyzer_reads(tmp_path: Path) -> None:
    store = pa.build_archive(tmp_path)
    assert (store / "mlp.mar").exists()
    config = (tmp_path / "src" / "model-config.yaml").read_text()
    assert "name: INPUT0" in config and "shape: [-1, 64]" in config and "batchSize: 8" in config
