"""The metrics handlers record in their worker (`context.metrics`), turned into Prometheus families on the fly.

A worker sends its `MetricsCache` records as dicts (`name`, `value`, `unit`, `metric_type`, `dimensions`, and
`request_id`, unused here). Each metric name becomes one family whose labels are the record's dimension names plus
`Hostname`, as TorchServe's backend metrics carry (`HandlerTime{ModelName="m",Level="Model",Hostname="h"}`).

Decisions:
- A counter keeps its name (no `_total`), like TorchServe's Java client, so it is held as a gauge that only
  grows and typed `counter` on the page (`counters()`, text_format.py); a gauge is set to the last value; a
  histogram observes each value.
- A histogram's buckets fit what it measures (`buckets_for`), decided when its family is made, by name, then unit:
  the generative latencies by their vLLM names (any prefix: `serve:time_to_first_token_seconds`) take vLLM's
  buckets, so its dashboards' quantiles mean the same: time to first token 1 ms .. 2560 s, inter-token latency (and
  time per output token) 10 ms .. 80 s, the per-request phases (`e2e_request_latency_seconds`,
  `request_queue_time_seconds`, `request_inference_time_seconds`, `request_prefill_time_seconds`,
  `request_decode_time_seconds`) 0.3 s .. 7680 s. A count (unit `count`: tokens, items) takes 1, 2, 5, 10, ...
  100000, vLLM's 1-2-5 series (it stops at max_model_len, which the server does not know; 100k covers today's
  contexts). Milliseconds and microseconds take prometheus-client's default buckets (5 ms .. 10 s) in that unit, as
  a handler's `add_time("HandlerTime", 3.2)` would otherwise land in the top buckets. Anything else (seconds, sizes,
  percent) keeps the default buckets, which are prometheus-client's (and TorchServe's Java client's).
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

DEFAULT_BUCKETS = tuple(b for b in Histogram.DEFAULT_BUCKETS if b != float("inf"))
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
TOKEN_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                         20.0, 40.0, 80.0)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                           240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
COUNT_BUCKETS = tuple(float(m * 10**e) for e in range(6) for m in (1, 2, 5) if m * 10**e <= 100_000)
_BY_NAME = {
    "time_to_first_token_seconds": TTFT_BUCKETS,
    "inter_token_latency_seconds": TOKEN_LATENCY_BUCKETS,
    "time_per_output_token_seconds": TOKEN_LATENCY_BUCKETS,
    **dict.fromkeys(("e2e_request_latency_seconds", "request_queue_time_seconds", "request_inference_time_seconds",
                     "request_prefill_time_seconds", "request_decode_time_seconds"), REQUEST_LATENCY_BUCKETS),
}  # fmt: skip
_SCALE = {"milliseconds": 1e3, "ms": 1e3, "microseconds": 1e6, "us": 1e6}


def buckets_for(name: str, unit: str) -> tuple[float, ...]:
    """The upper bounds of a handler histogram's buckets (module docstring), +Inf implied."""
    by_name = _BY_NAME.get(name.rsplit(":", 1)[-1])
    if by_name is not None:
        return by_name
    unit = unit.lower()
    if unit == "count":
        return COUNT_BUCKETS
    scale = _SCALE.get(unit)
    return tuple(round(b * scale, 6) for b in DEFAULT_BUCKETS) if scale else DEFAULT_BUCKETS


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
                    family = Histogram(name, doc, labelnames, registry=self._registry, buckets=buckets_for(name, unit))
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
