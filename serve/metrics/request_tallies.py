"""The metrics every request records, kept as plain numbers and made into Prometheus families when a page is rendered.

prometheus-client's `inc`, `set` and `observe` check the metric and take a lock on every call, and a prediction made
seven of them (its HTTP response class, the request count, two latency sums, the latency histogram, the queue
latency and depth): a tenth of the server process's CPU per prediction under load (bench/RESULTS.md). Here each is
an addition to a number the event loop owns; the families (names, help, types, labels, bucket bounds and the order
of samples exactly as the prometheus-client metrics gave them) are built when `/metrics` is collected.

Decisions:
- Only the event loop records, so the numbers need no lock. The page is rendered in a thread: it copies the tables
  first (`list(dict.items())` runs in C under the GIL, never seeing a table change size), so a page may show a
  histogram one request behind its count, as prometheus-client's separate locks allow too.
- A family's label set appears once it was first recorded, and `ts_queue_depth`'s goes when the model version is
  removed, as with prometheus-client's children.
- Rare records (errors by status, per-batch and per-worker metrics) stay prometheus-client metrics (server_metrics.py).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

MODEL_LABELS = ("model_name", "model_version", "hostname")
HOST_LABELS = ("Level", "Hostname")
LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_BOUNDS = (*LATENCY_BUCKETS, math.inf)
_LE = [floatToGoString(b) for b in _BOUNDS]
RESPONSE_CLASSES = ("2", "4", "5")
Key = tuple[str, str]  # (model name, version label: the version or "default")


def _help(kind: str, unit: str) -> str:
    return f"Torchserve prometheus {kind} metric with unit: {unit}"


class _Requests:
    """One model version's requests: how many, their latency sums and latency histogram (counts per bucket)."""

    __slots__ = ("buckets", "count", "latency_s", "latency_us")

    def __init__(self) -> None:
        self.count = 0.0
        self.latency_us = 0.0
        self.latency_s = 0.0
        self.buckets = [0.0] * len(_BOUNDS)


class RequestTallies:
    """Requests{2,4,5}XX, ts_inference_requests_total, ts_inference_latency_microseconds and _seconds,
    ts_queue_latency_microseconds, QueueTime and ts_queue_depth, for one hostname."""

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname
        self._responses = [0.0, 0.0, 0.0]
        self._requests: dict[Key, _Requests] = {}
        self._queue_us: dict[Key, float] = {}
        self._queue_ms: float | None = None  # QueueTime: the last wait
        self._depth: dict[Key, float] = {}

    def response(self, status: int) -> None:
        self._responses[1 if 400 <= status < 500 else 2 if status >= 500 else 0] += 1

    def request(self, key: Key, latency_s: float) -> None:
        tally = self._requests.get(key)
        if tally is None:
            tally = self._requests[key] = _Requests()
        tally.count += 1
        tally.latency_us += latency_s * 1e6
        tally.latency_s += latency_s
        tally.buckets[bisect_left(_BOUNDS, latency_s)] += 1  # the first bucket whose bound is >= the latency

    def queue_latency(self, key: Key, seconds: float) -> None:
        self._queue_us[key] = self._queue_us.get(key, 0.0) + seconds * 1e6
        self._queue_ms = seconds * 1e3

    def queue_depth(self, key: Key, depth: int) -> None:
        self._depth[key] = float(depth)

    def forget_depth(self, key: Key) -> None:
        self._depth.pop(key, None)

    def family(self, name: str) -> Any:
        """The family `name` (one of those in the class docstring) as prometheus-client would collect it."""
        host = ["Host", self.hostname]
        if name.startswith("Requests"):
            family = GaugeMetricFamily(name, _help("counter", "Count"), labels=HOST_LABELS)
            family.add_metric(host, self._responses[RESPONSE_CLASSES.index(name[8])])
            return family
        if name == "QueueTime":
            family = GaugeMetricFamily(name, _help("gauge", "Milliseconds"), labels=HOST_LABELS)
            if self._queue_ms is not None:
                family.add_metric(host, self._queue_ms)
            return family
        if name == "ts_queue_latency_microseconds":
            return self._per_key(GaugeMetricFamily(name, _help("counter", "Microseconds"), labels=MODEL_LABELS),
                                 list(self._queue_us.items()))  # fmt: skip
        if name == "ts_queue_depth":
            family = GaugeMetricFamily(name, "Requests waiting in the model's job queue", labels=MODEL_LABELS)
            return self._per_key(family, list(self._depth.items()))
        return self._request_family(name, list(self._requests.items()))

    def _request_family(self, name: str, tallies: list[tuple[Key, _Requests]]) -> Any:
        if name == "ts_inference_requests":
            counter = CounterMetricFamily(name, _help("counter", "Count"), labels=MODEL_LABELS)
            return self._per_key(counter, [(key, t.count) for key, t in tallies])
        if name == "ts_inference_latency_microseconds":
            gauge = GaugeMetricFamily(name, _help("counter", "Microseconds"), labels=MODEL_LABELS)
            return self._per_key(gauge, [(key, t.latency_us) for key, t in tallies])
        histogram = HistogramMetricFamily(name, "End-to-end inference time in seconds", labels=MODEL_LABELS)
        for key, t in tallies:
            buckets, cumulative = [], 0.0
            for le, count in zip(_LE, list(t.buckets), strict=True):
                cumulative += count
                buckets.append((le, cumulative))
            histogram.add_metric([*key, self.hostname], buckets, t.latency_s)
        return histogram

    def _per_key(self, family: Any, values: list[tuple[Key, float]]) -> Any:
        for key, value in values:
            family.add_metric([*key, self.hostname], value)
        return family
