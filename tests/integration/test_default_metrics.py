"""TorchServe's default metrics from a real `serve` process: on /metrics in prometheus mode, less what a
metrics_config leaves out; in log mode, in logs/ts_metrics.log and model_metrics.log with an empty /metrics."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.server import ServerProcess, recorder_archive

yaml = pytest.importorskip("yaml")

TORCHSERVE_YAML = Path(__file__).resolve().parents[1] / "fixtures" / "torchserve" / "metrics.yaml"
TIMEOUT = 60
FLAGS = ("--ncs", "--disable-token-auth", "--models", "echo=echo.mar")


def _store(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    store.mkdir()
    recorder_archive(store, "echo", tmp_path / "echo.log")
    return store


def _predict(server: ServerProcess) -> None:
    r = httpx.post(f"{server.inference}/predictions/echo", content=b"hello", timeout=TIMEOUT)
    assert r.status_code == 200, r.text


def test_prometheus_mode_serves_the_defaults_a_metrics_config_keeps(tmp_path):
    data = yaml.safe_load(TORCHSERVE_YAML.read_text())
    data["ts_metrics"]["gauge"] = [m for m in data["ts_metrics"]["gauge"] if m["name"] != "CPUUtilization"]
    config = tmp_path / "metrics.yaml"
    config.write_text(yaml.safe_dump(data))
    server = ServerProcess(tmp_path / "run", _store(tmp_path), *FLAGS, metrics_mode="prometheus",
                           metrics_config=config).start()  # fmt: skip
    try:
        _predict(server)
        page = httpx.get(f"{server.metrics}/metrics", timeout=TIMEOUT).text
    finally:
        server.stop()
    assert "CPUUtilization" not in page  # left out of the metrics_config
    for name in ("MemoryUsed", "MemoryAvailable", "MemoryUtilization", "DiskUsage", "DiskUtilization",
                 "DiskAvailable", "WorkerThreadTime", "QueueTime"):  # fmt: skip
        assert re.search(rf'^{name}{{Level="Host",Hostname="[^"]+",}} \d', page, re.M), (name, page)
    assert re.search(r'^WorkerLoadTime\{WorkerName="W-\d+-echo_1\.0",Level="Host",Hostname="[^"]+",\} \d', page, re.M)
    assert re.search(r'^PredictionTime\{ModelName="echo",Level="Model",Hostname="[^"]+",\} \d', page, re.M)
    used = float(re.search(r"^MemoryUsed\{.*\} (\S+)$", page, re.M).group(1))
    assert used > 0


def _wait_for(path: Path, pattern: str) -> str:
    deadline = time.monotonic() + TIMEOUT
    while True:
        text = path.read_text() if path.exists() else ""
        if re.search(pattern, text, re.M):
            return text
        assert time.monotonic() < deadline, f"{pattern!r} not in {path}:\n{text[-2000:]}"
        time.sleep(0.1)


def test_log_mode_writes_the_metrics_log_and_serves_an_empty_page(tmp_path):
    run = tmp_path / "run"
    server = ServerProcess(run, _store(tmp_path), *FLAGS, metrics_mode="log", metric_time_interval=1,
                           log_location=run / "logs").start()  # fmt: skip
    try:
        _predict(server)
        page = httpx.get(f"{server.metrics}/metrics", timeout=TIMEOUT)
        line = r"\|#Level:Host\|#hostname:[^,|]+,timestamp:\d+$"
        ts_log = run / "logs" / "ts_metrics.log"
        _wait_for(ts_log, r" - Requests2XX\.Count:1\.0" + line)
        for name, unit in (("CPUUtilization", "Percent"), ("MemoryUsed", "Megabytes"), ("DiskAvailable", "Gigabytes")):
            _wait_for(ts_log, rf" - {name}\.{unit}:[\d.E]+" + line)
        _wait_for(ts_log, r" - WorkerLoadTime\.Milliseconds:[\d.E]+\|#WorkerName:W-\d+-echo_1\.0,Level:Host\|")
        _wait_for(run / "logs" / "model_metrics.log", r" - PredictionTime\.ms:[\d.E]+\|#ModelName:echo,Level:Model\|")
    finally:
        server.stop()
    assert (page.status_code, page.text) == (200, "")
