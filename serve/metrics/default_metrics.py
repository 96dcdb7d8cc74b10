"""TorchServe's default metrics (its ts/configs/metrics.yaml) and which of them a `metrics_config` keeps.

Without a `metrics_config` every default metric is exported, as TorchServe does with its default file. With one,
a default metric the file does not declare (in either section) is dropped from `/metrics` and from the metrics
log, as TorchServe makes only the metrics its file lists. A default metric the file declares must keep the
dimensions serve records it with (TorchServe's; `Hostname` is added to model metrics, as TorchServe's backend
adds it): a different list stops the start with an error that names the metric and the list to write, where
TorchServe would log a failure at every update.
The file's unit for a default metric is the one its log lines carry (`CPUUtilization.Percent:...`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from serve.metrics.metrics_config import read_sections

HOST = ("Level", "Hostname")
MODEL = ("model_name", "model_version", "hostname")
GPU = ("Level", "DeviceId", "Hostname")
# TorchServe's metrics.yaml, ts_metrics: name -> (type, unit, dimensions)
TS_METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "Requests2XX": ("counter", "Count", HOST),
    "Requests4XX": ("counter", "Count", HOST),
    "Requests5XX": ("counter", "Count", HOST),
    "ts_inference_requests_total": ("counter", "Count", MODEL),
    "ts_inference_latency_microseconds": ("counter", "Microseconds", MODEL),
    "ts_queue_latency_microseconds": ("counter", "Microseconds", MODEL),
    "QueueTime": ("gauge", "Milliseconds", HOST),
    "WorkerThreadTime": ("gauge", "Milliseconds", HOST),
    "WorkerLoadTime": ("gauge", "Milliseconds", ("WorkerName", *HOST)),
    "CPUUtilization": ("gauge", "Percent", HOST),
    "MemoryUsed": ("gauge", "Megabytes", HOST),
    "MemoryAvailable": ("gauge", "Megabytes", HOST),
    "MemoryUtilization": ("gauge", "Percent", HOST),
    "DiskUsage": ("gauge", "Gigabytes", HOST),
    "DiskUtilization": ("gauge", "Percent", HOST),
    "DiskAvailable": ("gauge", "Gigabytes", HOST),
    "GPUMemoryUtilization": ("gauge", "Percent", GPU),
    "GPUMemoryUsed": ("gauge", "Megabytes", GPU),
    "GPUUtilization": ("gauge", "Percent", GPU),
}
# model_metrics (Hostname added by the backend)
MODEL_METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "HandlerTime": ("gauge", "ms", ("ModelName", "Level")),
    "PredictionTime": ("gauge", "ms", ("ModelName", "Level")),
}

DEFAULT_UNITS = {name: unit for name, (_, unit, _) in {**TS_METRICS, **MODEL_METRICS}.items()}


@dataclass(frozen=True)
class DefaultMetrics:
    """Which default metrics are kept, and the unit each is logged with."""

    dropped: frozenset[str] = frozenset()
    units: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_UNITS))

    def keeps(self, name: str) -> bool:
        return name not in self.dropped

    def family_names(self) -> frozenset[str]:
        """The dropped metrics as family names too (a counter's family has no `_total`)."""
        return self.dropped | {n.removesuffix("_total") for n in self.dropped}


def default_metrics(metrics_config: str | Path | None) -> DefaultMetrics:
    """The default metrics a metrics_config keeps (all without one); ValueError naming the entry when the file
    declares a default metric with dimensions or a type serve does not record it with."""
    if metrics_config is None:
        return DefaultMetrics()
    sections = read_sections(metrics_config)
    declared: dict[str, str] = {}
    for section, defaults in (("ts_metrics", TS_METRICS), ("model_metrics", MODEL_METRICS)):
        for metric in sections[section]:
            if metric.name not in defaults:
                continue
            kind, _, dims = defaults[metric.name]
            if metric.dimension_names != dims or metric.metric_type != kind:
                got = f"a {metric.metric_type} with {list(metric.dimension_names)}"
                raise ValueError(f"metrics_config {metrics_config}: {section} {metric.name} is recorded as a {kind} "
                                 f"with dimensions {list(dims)} (TorchServe's default); declare it so, or leave it "
                                 f"out to drop it (got {got})")  # fmt: skip
            declared[metric.name] = metric.unit
    names = set(TS_METRICS) | set(MODEL_METRICS)
    units = DEFAULT_UNITS | {name: unit for name, unit in declared.items() if unit}
    return DefaultMetrics(frozenset(names - set(declared)), units)
