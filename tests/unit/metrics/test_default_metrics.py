"""TorchServe's default metrics against its own metrics.yaml (tests/fixtures/torchserve, copied unchanged): every
one on the page with its type and dimensions, a metrics_config that leaves some out drops them, one that declares
other dimensions is refused, and metrics_mode log writes TorchServe's log lines."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pytest

from serve.metrics import ServerMetrics
from serve.metrics.default_metrics import MODEL_METRICS, TS_METRICS, DefaultMetrics, default_metrics
from serve.metrics.metrics_config import read_sections
from serve.metrics.metrics_log import MetricsLog
from serve.metrics.system_metrics import SystemMetrics
from tests.unit.config.fake_nvidia_smi import UUIDS, fake_nvidia_smi

yaml = pytest.importorskip("yaml")

TORCHSERVE_YAML = Path(__file__).resolve().parents[2] / "fixtures" / "torchserve" / "metrics.yaml"


def recorded(tmp_path: Path) -> ServerMetrics:
    """A ServerMetrics with one update of every default metric (the GPU ones from the fake nvidia-smi)."""
    metrics = ServerMetrics(hostname="h")
    for status in (200, 404, 500):
        metrics.http_response(status)
    metrics.request("m", "1.0", 200, 0.002)
    metrics.queue_latency("m", "1.0", 0.001)
    metrics.handler_time("m", "1.0", 3.0)
    metrics.worker_thread_time(0.5)
    metrics.worker_load_time("W-9000-m_1.0", 120.0)
    system = SystemMetrics("h", tmp_path)
    system.sample()
    metrics.watch_system(system)
    metrics.watch_gpus(list(UUIDS))
    return metrics


@pytest.fixture
def gpus_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{fake_nvidia_smi(tmp_path)}{os.pathsep}{os.environ.get('PATH', '')}")


def label_names(page: str, name: str) -> list[str]:
    match = re.search(rf"^{name}\{{(.*)\}} \S+$", page, re.M)
    assert match, f"no {name} sample in:\n{page}"
    return re.findall(r'(\w+)="[^"]*",', match.group(1))


def test_serves_table_is_torchserves_default_file():
    sections = read_sections(TORCHSERVE_YAML)
    assert {m.name: (m.metric_type, m.unit, m.dimension_names) for m in sections["ts_metrics"]} == TS_METRICS
    assert {m.name: (m.metric_type, m.unit, m.dimension_names) for m in sections["model_metrics"]} == MODEL_METRICS
    assert default_metrics(TORCHSERVE_YAML) == DefaultMetrics()  # TorchServe's own file keeps all of them


def test_every_default_metric_is_on_the_page_with_its_type_and_dimensions(tmp_path, gpus_on_path):
    page = recorded(tmp_path).render()[0].decode()
    sections = read_sections(TORCHSERVE_YAML)
    for metric in sections["ts_metrics"]:
        assert f"# TYPE {metric.name} {metric.metric_type}\n" in page, metric.name
        assert label_names(page, metric.name) == list(metric.dimension_names), metric.name
    for metric in sections["model_metrics"]:  # Hostname added, as TorchServe's backend adds it
        assert f"# TYPE {metric.name} {metric.metric_type}\n" in page, metric.name
        assert label_names(page, metric.name) == [*metric.dimension_names, "Hostname"], metric.name
    assert 'WorkerLoadTime{WorkerName="W-9000-m_1.0",Level="Host",Hostname="h",} 120.0' in page
    assert 'WorkerThreadTime{Level="Host",Hostname="h",} 0.5' in page
    assert 'PredictionTime{ModelName="m",Level="Model",Hostname="h",} 3.0' in page


def without(names: set[str], tmp_path: Path) -> Path:
    """TorchServe's metrics.yaml less the metrics `names`."""
    data = yaml.safe_load(TORCHSERVE_YAML.read_text())
    for section in ("ts_metrics", "model_metrics"):
        for kind, entries in data[section].items():
            data[section][kind] = [e for e in entries if e["name"] not in names]
    path = tmp_path / "metrics.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_metrics_config_that_leaves_metrics_out_drops_them(tmp_path, gpus_on_path):
    dropped = {"CPUUtilization", "PredictionTime", "ts_inference_requests_total", "GPUUtilization"}
    defaults = default_metrics(without(dropped, tmp_path))
    assert defaults.dropped == dropped
    metrics = recorded(tmp_path)
    metrics.configure(defaults)
    page = metrics.render()[0].decode()
    for name in dropped:
        assert f"{name}{{" not in page, name
    for name in ("MemoryUsed", "HandlerTime", "ts_inference_latency_microseconds", "GPUMemoryUsed"):
        assert f"{name}{{" in page, name  # the others stay
    assert "ts_inference_latency_seconds_count{" in page  # serve's own families are not TorchServe's to drop


def test_a_default_metric_declared_with_other_dimensions_is_refused(tmp_path):
    entry = "- name: CPUUtilization\n      unit: Percent\n      dimensions: "
    text = TORCHSERVE_YAML.read_text().replace(entry + "[*level, *hostname]", entry + "[*level]")
    assert text != TORCHSERVE_YAML.read_text()
    path = tmp_path / "metrics.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"CPUUtilization is recorded as a gauge with dimensions \['Level', "
                                         r"'Hostname'\].*got a gauge with \['Level'\]"):  # fmt: skip
        default_metrics(path)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_log_mode_writes_torchserves_log_lines(tmp_path):
    front, back = Lines(), Lines()
    loggers = []
    for name, handler in (("test.ts_metrics", front), ("test.model_metrics", back)):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        loggers.append(logger)
    try:
        defaults = default_metrics(without({"MemoryUsed"}, tmp_path))
        metrics = ServerMetrics(hostname="h")
        metrics.configure(defaults, MetricsLog("h", loggers[0], loggers[1], defaults))
        metrics.http_response(503)
        metrics.request("m", "", 200, 0.002)
        metrics.worker_load_time("W-9000-m_1.0", 120.0)
        metrics.handler_time("m", "1.0", 3.0)
        metrics.backend_metrics("m", "1.0", [{"name": "HandlerTime", "value": 2.5, "unit": "ms", "metric_type": "gauge",
                                              "dimensions": [["ModelName", "m"], ["Level", "Model"]],
                                              "request_id": "r1"}])  # fmt: skip
        SystemMetrics("h", tmp_path, on_sample=metrics.log.host).sample()  # type: ignore[union-attr]
    finally:
        for logger, handler in zip(loggers, (front, back), strict=True):
            logger.removeHandler(handler)
    stamp = r",timestamp:\d+$"
    expected_front = [
        r"Requests5XX\.Count:1\.0\|#Level:Host\|#hostname:h" + stamp,
        r"ts_inference_requests_total\.Count:1\.0\|#model_name:m,model_version:default\|#hostname:h" + stamp,
        r"ts_inference_latency_microseconds\.Microseconds:2000\.0\|#model_name:m,model_version:default\|#hostname:h"
        + stamp,
        r"WorkerLoadTime\.Milliseconds:120\.0\|#WorkerName:W-9000-m_1\.0,Level:Host\|#hostname:h" + stamp,
        r"CPUUtilization\.Percent:\d+\.\d+\|#Level:Host\|#hostname:h" + stamp,
        r"MemoryAvailable\.Megabytes:\d+\.\d+\|#Level:Host\|#hostname:h" + stamp,
        r"DiskAvailable\.Gigabytes:[\d.E]+\|#Level:Host\|#hostname:h" + stamp,
    ]
    for pattern in expected_front:
        assert any(re.fullmatch(pattern, line) for line in front.lines), (pattern, front.lines)
    assert not any(line.startswith("MemoryUsed.") for line in front.lines)  # dropped by the metrics_config
    assert any(re.fullmatch(r"PredictionTime\.ms:3\.0\|#ModelName:m,Level:Model\|#hostname:h,requestID:" + stamp,
                            line) for line in back.lines), back.lines  # fmt: skip
    assert any(re.fullmatch(r"HandlerTime\.ms:2\.5\|#ModelName:m,Level:Model\|#hostname:h,requestID:r1" + stamp,
                            line) for line in back.lines), back.lines  # fmt: skip


def test_metrics_log_files_are_torchserves(tmp_path):
    log = MetricsLog.to_files("h", tmp_path / "logs")
    try:
        log.default("QueueTime", (("Level", "Host"),), 4.0)
        log.backend("HandlerTime", "ms", (("ModelName", "m"), ("Level", "Model")), 1.5, "r")
        for handler in logging.getLogger("TS_METRICS").handlers + logging.getLogger("MODEL_METRICS").handlers:
            handler.flush()
        stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{3} - "  # log4j2's %d{ISO8601} - %m
        ts_line = (tmp_path / "logs" / "ts_metrics.log").read_text()
        assert re.fullmatch(stamp + r"QueueTime\.Milliseconds:4\.0\|#Level:Host\|#hostname:h,timestamp:\d+\n", ts_line)
        model_line = (tmp_path / "logs" / "model_metrics.log").read_text()
        assert re.fullmatch(stamp + r"HandlerTime\.ms:1\.5\|#ModelName:m,Level:Model\|#hostname:h,requestID:r,"
                            r"timestamp:\d+\n", model_line)  # fmt: skip
    finally:
        for name in ("TS_METRICS", "MODEL_METRICS"):
            for handler in logging.getLogger(name).handlers[:]:
                logging.getLogger(name).removeHandler(handler)
                handler.close()
