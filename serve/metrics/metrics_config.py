"""TorchServe's metrics YAML (`metrics_config=metrics.yaml` in config.properties), read for its model metrics.

TorchServe's backend makes every metric of the file's `model_metrics` section in each worker's metrics cache
before the handler loads, so a handler may `context.metrics.get_metric("RequestBatchSize", MetricTypes.GAUGE)`
without adding it first (its custom_metrics example does). `read_metrics_config` returns those declarations; the
worker makes them (serve/worker/process.py), each with exactly the dimension names the file lists (`Hostname` is
added on export, as TorchServe's backend adds it).

Decisions:
- The file's shape is TorchServe's: `dimensions` (a list, usually of YAML anchors), `ts_metrics` and
  `model_metrics`, each of the last two a mapping from `counter`/`gauge`/`histogram` to a list of
  `{name, unit, dimensions}`. Both sections are checked; a metric without a name, an unknown type or dimensions
  that are not a list of strings is a ValueError naming the file, the section and the entry, so a typo stops the
  server at startup instead of a handler failing at its first request.
- Of TorchServe's default metrics (its own metrics.yaml: the `ts_metrics` of the frontend and host, HandlerTime
  and PredictionTime), a file keeps those it declares, with their default dimensions, and drops the others from
  `/metrics` and the metrics log (default_metrics.py). serve's own families (`ts_inference_errors_total`,
  `ts_batch_size`, ...) are not TorchServe's and stay whatever the file lists.
- The file is read with PyYAML (imported here only): TorchServe's files name their dimensions through YAML anchors
  and aliases, which serve's own model-config reader refuses. Without PyYAML, a metrics_config is an error that
  says to install it; serve runs without one as before.
- Metrics a handler records that the file does not declare are exported too (TorchServe's
  `model_metrics_auto_detect=true`, the custom_metrics example's setting); serve has no "declared only" mode.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

METRIC_TYPES = ("counter", "gauge", "histogram")
SECTIONS = ("ts_metrics", "model_metrics")


@dataclasses.dataclass(frozen=True)
class DeclaredMetric:
    """One metric of the file: what `add_metric_to_cache(name, unit, dimension_names, metric_type)` takes."""

    name: str
    unit: str
    dimension_names: tuple[str, ...]
    metric_type: str


def read_metrics_config(path: str | Path) -> list[DeclaredMetric]:
    """The `model_metrics` the file declares, in its order; ValueError when the file is not TorchServe's shape."""
    return read_sections(path)["model_metrics"]


def read_sections(path: str | Path) -> dict[str, list[DeclaredMetric]]:
    """Both sections of the file ({"ts_metrics": [...], "model_metrics": [...]}), each in the file's order."""
    path = Path(path)
    try:
        import yaml
    except ImportError:
        raise ValueError(f"metrics_config {path}: reading TorchServe's metrics YAML needs PyYAML; "
                         "pip install pyyaml, or remove metrics_config") from None  # fmt: skip
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"metrics_config {path}: cannot read it as YAML: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"metrics_config {path}: expected a mapping with ts_metrics and model_metrics, got "
                         f"{type(data).__name__}")  # fmt: skip
    return {section: _section(path, section, data.get(section)) for section in SECTIONS}


def _section(path: Path, section: str, body: Any) -> list[DeclaredMetric]:
    if body is None:
        return []
    if not isinstance(body, dict):
        raise ValueError(f"metrics_config {path}: {section} must map counter/gauge/histogram to lists of metrics")
    out = []
    for metric_type, entries in body.items():
        if metric_type not in METRIC_TYPES:
            raise ValueError(f"metrics_config {path}: {section}.{metric_type} is not a metric type; use one of "
                             f"{list(METRIC_TYPES)}")  # fmt: skip
        for entry in entries or []:
            out.append(_metric(path, f"{section}.{metric_type}", entry, metric_type))
    return out


def _metric(path: Path, where: str, entry: Any, metric_type: str) -> DeclaredMetric:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
        raise ValueError(f"metrics_config {path}: each metric of {where} needs a name (and a unit and dimensions), "
                         f"got {entry!r}")  # fmt: skip
    dims = entry.get("dimensions") or []
    if not isinstance(dims, list) or not all(isinstance(d, str) for d in dims):
        raise ValueError(f"metrics_config {path}: {where} {entry['name']}: dimensions must be a list of names, "
                         f"got {dims!r}")  # fmt: skip
    unit = entry.get("unit", "")
    return DeclaredMetric(entry["name"], "" if unit is None else str(unit), tuple(dims), metric_type)
