"""bench/grpc_echo.py kept from rotting: a very short run of two of its server variants prints their table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_short_run_prints_cpu_per_rpc_of_each_variant() -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "grpc_echo.py"), "--seconds", "0.3", "--rounds", "1"]
    out = subprocess.run([*cmd, "aio", "sync-loop"], capture_output=True, text=True, timeout=120, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| aio |") or line.startswith("| sync-loop |")]
    assert len(rows) == 2, out
    for row in rows:
        assert float(row.split("|")[3]) > 0, row  # server CPU ms per call
