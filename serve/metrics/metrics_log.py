"""The metrics log of `metrics_mode=log` (and `legacy`): TorchServe's `ts_metrics.log` and `model_metrics.log`.

Each metric update is one line, as TorchServe's LogMetric writes it, under `{log_location}`:

    ts_metrics.log      2026-11-28T12:00:00,123 - CPUUtilization.Percent:12.5|#Level:Host|#hostname:h,timestamp:1764
    model_metrics.log   ... - HandlerTime.ms:3.1|#ModelName:m,Level:Model|#hostname:h,requestID:,timestamp:...

The frontend lines go to the `TS_METRICS` logger, the backend (handler) ones to `MODEL_METRICS`, the logger names
TorchServe's log4j2.xml routes to those files. Decisions:
- A file handler is added only to a logger that has none, so a `--log-config` that routes `TS_METRICS` or
  `MODEL_METRICS` elsewhere is kept; the two loggers do not propagate to the root (metric lines are not server
  log lines), as in TorchServe's log4j2.xml.
- Values are written as Java writes a double (`1.0`, text_format.java_double), so log agents parsing TorchServe's
  lines parse these.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from serve.metrics.default_metrics import DefaultMetrics
from serve.metrics.text_format import java_double

FRONTEND_LOGGER, BACKEND_LOGGER = "TS_METRICS", "MODEL_METRICS"
FILES = {FRONTEND_LOGGER: "ts_metrics.log", BACKEND_LOGGER: "model_metrics.log"}
HOST = (("Level", "Host"),)  # the dimensions of the host-level metrics (Hostname is written apart)


class _Iso8601(logging.Formatter):
    """log4j2's %d{ISO8601}: 2026-11-28T12:00:00,123."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(record.created)) + f",{int(record.msecs):03d}"


class MetricsLog:
    """Writes metric updates as TorchServe's metric log lines; the default metrics `defaults` drops are not written.
    The event methods below are the updates ServerMetrics records (it calls them in metrics_mode log and legacy)."""

    def __init__(self, hostname: str, frontend: logging.Logger, backend: logging.Logger,
                 defaults: DefaultMetrics | None = None) -> None:  # fmt: skip
        self.hostname, self._frontend, self._backend = hostname, frontend, backend
        self.defaults = defaults or DefaultMetrics()

    @classmethod
    def to_files(cls, hostname: str, log_location: Path, defaults: DefaultMetrics | None = None) -> MetricsLog:
        """The loggers TorchServe names, each with a file under `log_location` unless configured already."""
        loggers = []
        for name, file_name in FILES.items():
            logger = logging.getLogger(name)
            if not logger.handlers:
                log_location.mkdir(parents=True, exist_ok=True)
                handler = logging.FileHandler(log_location / file_name, encoding="utf-8")
                handler.setFormatter(_Iso8601("%(asctime)s - %(message)s"))
                logger.addHandler(handler)
                logger.setLevel(logging.INFO)
                logger.propagate = False
            loggers.append(logger)
        return cls(hostname, loggers[0], loggers[1], defaults)

    def frontend(self, name: str, unit: str, dimensions: Sequence[tuple[str, str]], value: float) -> None:
        """One frontend metric update (ts_metrics.log)."""
        self._frontend.info("%s", self.line(name, unit, dimensions, value))

    def backend(self, name: str, unit: str, dimensions: Sequence[tuple[str, str]], value: float,
                request_ids: str = "") -> None:  # fmt: skip
        """One handler metric update (model_metrics.log), with the request ids of its batch as TorchServe adds."""
        self._backend.info("%s", self.line(name, unit, dimensions, value, request_ids))

    def line(self, name: str, unit: str, dimensions: Sequence[tuple[str, str]], value: float,
             request_ids: str | None = None) -> str:  # fmt: skip
        """TorchServe's LogMetric line; `request_ids` (backend metrics) adds its `requestID:` field."""
        dims = ",".join(f"{k}:{v}" for k, v in dimensions)
        ids = "" if request_ids is None else f",requestID:{request_ids}"
        return f"{name}.{unit}:{java_double(value)}|#{dims}|#hostname:{self.hostname}{ids},timestamp:{int(time.time())}"

    # ---- the updates ServerMetrics records ----------------------------------------------------------------------

    def default(self, name: str, dimensions: Sequence[tuple[str, str]], value: float) -> None:
        """A frontend default metric (its unit from metrics_config or TorchServe's), unless dropped."""
        if self.defaults.keeps(name):
            self.frontend(name, self.defaults.units.get(name, ""), dimensions, value)

    def response(self, status: int) -> None:
        self.default(f"Requests{'4' if 400 <= status < 500 else '5' if status >= 500 else '2'}XX", HOST, 1.0)

    def request(self, model: str, version: str, latency_s: float) -> None:
        self.default("ts_inference_requests_total", self._model(model, version), 1.0)
        self.default("ts_inference_latency_microseconds", self._model(model, version), latency_s * 1e6)

    def queue(self, model: str, version: str, seconds: float) -> None:
        self.default("ts_queue_latency_microseconds", self._model(model, version), seconds * 1e6)
        self.default("QueueTime", HOST, seconds * 1e3)

    def host(self, values: Mapping[str, float]) -> None:
        """A sample of the host gauges (system_metrics.py)."""
        for name, value in values.items():
            self.default(name, HOST, value)

    def families(self, families: Iterable[Any]) -> None:
        """Every sample of these gauge families (the GPU gauges), its labels but Hostname as the dimensions."""
        for family in families:
            for sample in family.samples:
                dims = [(k, v) for k, v in sample.labels.items() if k != "Hostname"]
                self.default(sample.name, dims, sample.value)

    def handler(self, model: str, ms: float) -> None:
        """PredictionTime, measured around the worker's call of the handler (backend metric)."""
        if self.defaults.keeps("PredictionTime"):
            self.backend("PredictionTime", self.defaults.units["PredictionTime"], (("ModelName", model),
                         ("Level", "Model")), ms)  # fmt: skip

    def records(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Metrics a handler recorded (MetricsCache records as dicts), HandlerTime among them."""
        for rec in records:
            name, value = str(rec.get("name", "")), rec.get("value")
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not self.defaults.keeps(name):
                continue
            raw = rec.get("dimensions") or ()
            dims = [(str(k), str(v)) for k, v in (raw.items() if isinstance(raw, Mapping) else raw)]
            self.backend(name, str(rec.get("unit", "")), dims, float(value), str(rec.get("request_id") or ""))

    def _model(self, model: str, version: str) -> list[tuple[str, str]]:
        return [("model_name", model), ("model_version", version or "default")]
