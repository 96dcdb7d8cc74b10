"""The metrics handlers record in their worker (`context.metrics`), turned into Prometheus families on the fly.

A worker sends its `MetricsCache` records as dicts (`name`, `value`, `unit`, `metric_type`, `dimensions`, and
`request_id`, unused here). Each metric name becomes one family whose labels are the record's dimension names plus
`Hostname`, as TorchServe's backend metrics carry (`HandlerTime{ModelName="m",Level="Model",Hostname="h"}`).

Decisions:
- A counter keeps its name (no `_total`), like TorchServe's Java client, so it is held as a gauge that only
  grows and typed `counter` on the page (`counters()`, text_format.py); a gauge is set to the last value; a
  histogram observes each value.
- Names and label names are made Prometheus-safe (`my-metric` -> `my_metric`).
- A record that does not fit the family already registered under its name (another type or other dimensions) is
  dropped with one warning per name: Prometheus needs one label set per family, and a handler bug must not break
  the whole `/metrics` page.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^a-zA-Z0-9_:]")
_KINDS = ("counter", "gauge", "histogram")


def safe_name(name: str) -> str:
    """A valid Prometheus metric or label name: unsafe characters become `_`, a leading digit gets a `_`."""
    cleaned = _UNSAFE.sub("_", name) or "_"
    return "_" + cleaned if cleaned[0].isdigit() else cleaned


def _dimensions(raw: Any) -> dict[str, str]:
    """Dimensions arrive as a mapping or as (name, value) pairs (a MetricRecord sent as JSON)."""
    pairs = raw.items() if isinstance(raw, Mapping) else (raw or ())
    return {safe_name(str(k)): str(v) for k, v in pairs}


class BackendMetrics:
    """Families created from worker records, registered in the server's own CollectorRegistry."""

    def __init__(self, registry: CollectorRegistry, hostname: str) -> None:
        self._registry = registry
        self._hostname = hostname
        self._families: dict[str, tuple[str, tuple[str, ...], Gauge | Histogram]] = {}
        self._warned: set[str] = set()

    def adopt(self, name: str, kind: str, labelnames: Sequence[str], family: Gauge | Histogram) -> None:
        """Route records named `name` to a family the server defines itself (HandlerTime)."""
        self._families[name] = (kind, tuple(labelnames), family)

    def counters(self) -> set[str]:
        """The names of the families that hold handler counters (gauges that only grow)."""
        return {name for name, (kind, _, _) in self._families.items() if kind == "counter"}

    def record(self, records: Sequence[Mapping[str, Any]]) -> None:
        for rec in records:
            name = safe_name(str(rec.get("name", "")))
            kind = str(rec.get("metric_type", "gauge")).lower()
            value = rec.get("value")
            if kind not in _KINDS or not isinstance(value, (int, float)) or isinstance(value, bool):
                self._warn(name, f"type {kind!r} with value {value!r}")
                continue
            labels = {**_dimensions(rec.get("dimensions")), "Hostname": self._hostname}
            family = self._family(name, kind, tuple(labels), str(rec.get("unit", "")))
            if family is None:
                continue
            child = family.labels(**labels)
            if isinstance(child, Histogram):
                child.observe(value)
            elif kind == "counter":
                child.inc(value)
            else:
                child.set(value)

    def _family(self, name: str, kind: str, labelnames: tuple[str, ...], unit: str) -> Gauge | Histogram | None:
        known = self._families.get(name)
        if known is None:
            doc = f"Torchserve prometheus {kind} metric with unit: {unit}"
            family: Gauge | Histogram
            try:
                if kind == "histogram":
                    family = Histogram(name, doc, labelnames, registry=self._registry)
                else:
                    family = Gauge(name, doc, labelnames, registry=self._registry)
            except ValueError as exc:  # the name of one of the server's own metrics (ts_batch_size, ...)
                self._warn(name, f"a name the server uses ({exc})")
                return None
            known = self._families[name] = (kind, labelnames, family)
        known_kind, known_labels, known_family = known
        if known_kind != kind or set(known_labels) != set(labelnames):
            self._warn(
                name, f"{kind} with labels {sorted(labelnames)} (registered: {known_kind} {sorted(known_labels)})"
            )
            return None
        return known_family

    def _warn(self, name: str, what: str) -> None:
        if name not in self._warned:
            self._warned.add(name)
            log.warning("dropping records of handler metric %r: %s does not fit; rename the metric", name, what)
