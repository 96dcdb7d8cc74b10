"""The metrics a handler records while it runs a batch (`context.metrics`), kept in order for the server to export.

The method names and arguments are TorchServe's `ts.metrics` cache (`add_time`, `add_counter`, `add_size`,
`add_percent`, `add_metric`), so a handler written for TorchServe records its custom metrics unchanged:

    context.metrics.add_time("HandlerTime", 3.2, None, "ms")
    context.metrics.add_counter("CacheHits", 1, idx=0, dimensions={"Cache": "lru"})

Units are stored under TorchServe's long names ("ms" -> "Milliseconds"), as its metric log lines show them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

UNIT_NAMES = {
    "ms": "Milliseconds",
    "s": "Seconds",
    "us": "Microseconds",
    "B": "Bytes",
    "kB": "Kilobytes",
    "MB": "Megabytes",
    "GB": "Gigabytes",
    "percent": "Percent",
    "count": "Count",
}
TIME_UNITS = ("ms", "s", "us")
SIZE_UNITS = ("B", "kB", "MB", "GB")
METRIC_TYPES = ("counter", "gauge", "histogram")


@dataclasses.dataclass(frozen=True)
class MetricRecord:
    """One recorded value: TorchServe's `Metric` (name, value, unit, dimensions, type) and its request id."""

    name: str
    value: float
    unit: str
    metric_type: str
    dimensions: tuple[tuple[str, str], ...]
    request_id: str | None

    def __str__(self) -> str:
        """TorchServe's metric log line: `HandlerTime.Milliseconds:3.2|#ModelName:m,Level:Model`."""
        dims = ",".join(f"{k}:{v}" for k, v in self.dimensions)
        return f"{self.name}.{self.unit}:{self.value}|#{dims}"


class MetricsCache:
    """Records metrics in the order they are added; `records()` reads them, `clear()` empties the cache."""

    def __init__(self, model_name: str | None = None, request_ids: Mapping[int, str] | None = None) -> None:
        self.model_name = model_name
        self.request_ids: Mapping[int, str] = request_ids or {}
        self._records: list[MetricRecord] = []

    def add_time(self, name: str, value: float, idx: int | str | None = None, unit: str = "ms",
                 dimensions: Mapping[str, str] | None = None, metric_type: str = "gauge") -> None:  # fmt: skip
        _check_unit("a time metric", unit, TIME_UNITS)
        self.add_metric(name, value, unit, idx, dimensions, metric_type)

    def add_counter(self, name: str, value: float, idx: int | str | None = None,
                    dimensions: Mapping[str, str] | None = None) -> None:  # fmt: skip
        self.add_metric(name, value, "count", idx, dimensions, "counter")

    def add_size(self, name: str, value: float, idx: int | str | None = None, unit: str = "MB",
                 dimensions: Mapping[str, str] | None = None, metric_type: str = "gauge") -> None:  # fmt: skip
        _check_unit("a size metric", unit, SIZE_UNITS)
        self.add_metric(name, value, unit, idx, dimensions, metric_type)

    def add_percent(self, name: str, value: float, idx: int | str | None = None,
                    dimensions: Mapping[str, str] | None = None, metric_type: str = "gauge") -> None:  # fmt: skip
        self.add_metric(name, value, "percent", idx, dimensions, metric_type)

    def add_metric(self, name: str, value: float, unit: str, idx: int | str | None = None,
                   dimensions: Mapping[str, str] | None = None, metric_type: str = "counter") -> None:  # fmt: skip
        """Record `value`; `idx` is the batch index of the request it belongs to (or its request id)."""
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TypeError(f"metric {name!r}: value must be an int or float, got {type(value).__name__} {value!r}")
        if metric_type not in METRIC_TYPES:
            raise ValueError(f"metric {name!r}: metric_type {metric_type!r} is not one of {list(METRIC_TYPES)}")
        dims = {"ModelName": self.model_name or "", "Level": "Model", **(dimensions or {})}
        record = MetricRecord(name, value, UNIT_NAMES.get(unit, unit), metric_type,
                              tuple((str(k), str(v)) for k, v in dims.items()), self._request_id(idx))  # fmt: skip
        self._records.append(record)

    def records(self) -> list[MetricRecord]:
        return list(self._records)

    def clear(self) -> None:
        self._records.clear()

    def _request_id(self, idx: int | str | None) -> str | None:
        if isinstance(idx, str):
            return idx
        if idx is None:  # a batch-level metric belongs to every request of the batch, as in TorchServe
            return ",".join(self.request_ids.values()) or None
        return self.request_ids.get(idx)


def _check_unit(what: str, unit: str, allowed: tuple[str, ...]) -> None:
    if unit not in allowed:
        raise ValueError(f"the unit of {what} must be one of {list(allowed)}, got {unit!r}")
