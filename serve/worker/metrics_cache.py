"""The metrics a handler records while it runs a batch (`context.metrics`), kept in order for the server to export.

The API is TorchServe's `ts.metrics` cache, names, argument orders and defaults, so a handler written for
TorchServe records its custom metrics unchanged:

    context.metrics.add_time("HandlerTime", 3.2, None, "ms")
    context.metrics.add_counter("CacheHits", 1, idx=0, dimensions=[Dimension("Cache", "lru")])
    metric = context.metrics.add_metric_to_cache("Tokens", "count", ["Source"], MetricTypes.HISTOGRAM)
    metric.add_or_update(17, ["prompt"], request_id)            # or metric.update(17, request_id, [Dimension(...)])
    context.metrics.get_metric("Tokens", MetricTypes.HISTOGRAM)  # the same object; MetricsCacheKeyError if absent

Dimensions are a list of `Dimension(name, value)` objects (TorchServe's form) or a {name: value} mapping (ours).
The `add_*` methods add the default dimensions `ModelName` and `Level: Model` unless given; a metric made with
`add_metric_to_cache` carries only its own dimension names, as TorchServe's "metrics without default
dimensions". `metric_type` is a `MetricTypes` member or its string ("counter", "gauge", "histogram").
Units are stored under TorchServe's long names ("ms" -> "Milliseconds"), as its metric log lines show them.
`declared_metrics_cache` is the worker's cache with the metrics of a `metrics_config` YAML already made.
Metric objects stay in the cache across batches (`get_metric` finds them); `clear()` empties only the records.
`drain()` takes the records and empties the list in one step under the cache's lock: a continuous handler records
from its own threads (the engine's) while the worker sends what was recorded so far, and no record is lost or sent
twice between the two.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from serve.metrics.metrics_config import read_metrics_config

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


class MetricTypes(enum.StrEnum):
    """TorchServe's `ts.metrics.metric_type_enum.MetricTypes`."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


class Dimension:
    """TorchServe's `ts.metrics.dimension.Dimension`: one (name, value) label of a metric."""

    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.value = value

    def __str__(self) -> str:
        return f"{self.name}:{self.value}"

    def __repr__(self) -> str:
        return f"Dimension({self.name!r}, {self.value!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dimension) and (self.name, self.value) == (other.name, other.value)

    def __hash__(self) -> int:
        return hash((self.name, str(self.value)))

    def to_dict(self) -> dict[str, Any]:
        return {"Name": self.name, "Value": self.value}


class MetricsCacheKeyError(KeyError):
    """`get_metric` of a metric that is not in the cache (TorchServe's `metric_cache_errors` name)."""


Dimensions = Mapping[str, Any] | Iterable[Dimension] | None
MetricType = MetricTypes | str


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

    def to_dict(self) -> dict[str, Any]:
        """The record as the worker sends it to the server (serve/metrics/backend_metrics.py reads it)."""
        return {"name": self.name, "value": self.value, "unit": self.unit, "metric_type": self.metric_type,
                "dimensions": [list(d) for d in self.dimensions], "request_id": self.request_id}  # fmt: skip


class CachingMetric:
    """TorchServe's `CachingMetric`: a metric with fixed dimension names; each value recorded into its cache."""

    def __init__(self, cache: MetricsCache, metric_name: str, unit: str, dimension_names: list[str] | None = None,
                 metric_type: MetricType = MetricTypes.COUNTER) -> None:  # fmt: skip
        self._cache = cache
        self.metric_name = metric_name
        self.unit = UNIT_NAMES.get(unit, unit)
        self.dimension_names = list(dimension_names or [])
        self.metric_type = _type_name(metric_name, metric_type)

    def add_or_update(
        self, value: float, dimension_values: list[Any] | None = None, request_id: str | None = ""
    ) -> None:
        """Record `value` with one value per dimension name, in the names' order."""
        values = list(dimension_values or [])
        if len(values) != len(self.dimension_names):
            raise ValueError(
                f"metric {self.metric_name!r} has the dimensions {self.dimension_names}: give one value for each, "
                f"got {values}"
            )
        _check_value(self.metric_name, value)
        dims = tuple((str(k), str(v)) for k, v in zip(self.dimension_names, values))
        record = MetricRecord(self.metric_name, value, self.unit, self.metric_type, dims, request_id or None)
        self._cache._append(record)

    def update(self, value: float, request_id: str | None = "", dimensions: list[Dimension] | None = None) -> None:
        """Record `value` with the values of these Dimension objects (TorchServe's `update`)."""
        self.add_or_update(value, [d.value for d in dimensions or []], request_id)


class MetricsCache:
    """Records metrics in the order they are added; `records()` reads them, `clear()` empties the records."""

    def __init__(self, model_name: str | None = None, request_ids: Mapping[int, str] | None = None) -> None:
        self.model_name = model_name
        self.request_ids: Mapping[int, str] = request_ids or {}
        self._records: list[MetricRecord] = []
        self._lock = threading.Lock()  # records come from the handler's threads too (continuous mode)
        self.cache: dict[tuple[str, str], CachingMetric] = {}

    def add_time(self, name: str, value: float, idx: int | str | None = None, unit: str = "ms",
                 dimensions: Dimensions = None, metric_type: MetricType = MetricTypes.GAUGE) -> None:  # fmt: skip
        _check_unit("a time metric", unit, TIME_UNITS)
        self.add_metric(name, value, unit, idx, dimensions, metric_type)

    def add_counter(self, name: str, value: float, idx: int | str | None = None, dimensions: Dimensions = None) -> None:
        self.add_metric(name, value, "count", idx, dimensions, MetricTypes.COUNTER)

    def add_size(self, name: str, value: float, idx: int | str | None = None, unit: str = "MB",
                 dimensions: Dimensions = None, metric_type: MetricType = MetricTypes.GAUGE) -> None:  # fmt: skip
        _check_unit("a size metric", unit, SIZE_UNITS)
        self.add_metric(name, value, unit, idx, dimensions, metric_type)

    def add_percent(self, name: str, value: float, idx: int | str | None = None, dimensions: Dimensions = None,
                    metric_type: MetricType = MetricTypes.GAUGE) -> None:  # fmt: skip
        self.add_metric(name, value, "percent", idx, dimensions, metric_type)

    def add_error(self, name: str, value: float, dimensions: Dimensions = None) -> None:
        """TorchServe's error counter: no unit, `Level: Error` unless given."""
        dims = {"Level": "Error", **_dimension_dict(dimensions)}
        self._metric(name, "", MetricTypes.COUNTER, list(dims)).add_or_update(value, list(dims.values()), None)

    def add_metric(self, name: str, value: float, unit: str, idx: int | str | None = None,
                   dimensions: Dimensions = None, metric_type: MetricType = MetricTypes.COUNTER) -> None:  # fmt: skip
        """Record `value`; `idx` is the batch index of the request it belongs to (or its request id)."""
        _check_value(name, value)
        dims = {"ModelName": self.model_name or "", "Level": "Model", **_dimension_dict(dimensions)}
        metric = self._metric(name, unit, metric_type, list(dims))
        record = MetricRecord(name, value, metric.unit, metric.metric_type,
                              tuple((str(k), str(v)) for k, v in dims.items()), self._request_id(idx))  # fmt: skip
        self._append(record)

    def add_metric_to_cache(self, metric_name: str, unit: str, dimension_names: list[str] | None = None,
                            metric_type: MetricType = MetricTypes.COUNTER) -> CachingMetric:  # fmt: skip
        """A new metric object in the cache (replacing one of the same name and type), TorchServe's signature."""
        if not isinstance(metric_name, str) or not isinstance(unit, str):
            raise TypeError(f"add_metric_to_cache: metric_name and unit must be str, got {metric_name!r}, {unit!r}")
        metric = CachingMetric(self, metric_name, unit, dimension_names, metric_type)
        self.cache[(metric_name, metric.metric_type)] = metric
        return metric

    def get_metric(self, metric_name: str, metric_type: MetricType = MetricTypes.COUNTER) -> CachingMetric:
        """The cached metric of this name and type; MetricsCacheKeyError when there is none."""
        key = (metric_name, _type_name(metric_name, metric_type))
        if key not in self.cache:
            known = ", ".join(f"{n} ({t})" for n, t in self.cache) or "none"
            raise MetricsCacheKeyError(
                f"metric {metric_name!r} of type {key[1]} is not in the cache (known: {known}): add it with "
                "add_metric_to_cache(name, unit, dimension_names, metric_type) first"
            )
        return self.cache[key]

    def records(self) -> list[MetricRecord]:
        with self._lock:
            return list(self._records)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    def drain(self) -> list[MetricRecord]:
        """The records so far, which leave the cache: a record added meanwhile stays for the next drain."""
        with self._lock:
            records, self._records = self._records, []
        return records

    def _append(self, record: MetricRecord) -> None:
        with self._lock:
            self._records.append(record)

    def _metric(self, name: str, unit: str, metric_type: MetricType, dimension_names: list[str]) -> CachingMetric:
        key = (name, _type_name(name, metric_type))
        metric = self.cache.get(key)
        if metric is None or metric.dimension_names != dimension_names or metric.unit != UNIT_NAMES.get(unit, unit):
            metric = self.add_metric_to_cache(name, unit, dimension_names, metric_type)
        return metric

    def _request_id(self, idx: int | str | None) -> str | None:
        if isinstance(idx, str):
            return idx
        if idx is None:  # a batch-level metric belongs to every request of the batch, as in TorchServe
            return ",".join(self.request_ids.values()) or None
        return self.request_ids.get(idx)


def declared_metrics_cache(model_name: str, metrics_config: str | Path | None) -> MetricsCache:
    """A model's metrics cache holding the `model_metrics` of TorchServe's metrics YAML (`metrics_config`), as
    TorchServe's backend makes them before the handler loads, so `get_metric` finds them; ValueError for a bad
    file."""
    cache = MetricsCache(model_name)
    for metric in read_metrics_config(metrics_config) if metrics_config else []:
        cache.add_metric_to_cache(metric.name, metric.unit, list(metric.dimension_names), metric.metric_type)
    return cache


def _dimension_dict(dimensions: Dimensions) -> dict[str, Any]:
    """{name: value} from a mapping or from TorchServe's list of Dimension objects."""
    if dimensions is None:
        return {}
    if isinstance(dimensions, Mapping):
        return dict(dimensions)
    out = {}
    for dim in dimensions:
        if not hasattr(dim, "name") or not hasattr(dim, "value"):
            raise TypeError(
                f"dimensions must be Dimension(name, value) objects or a {{name: value}} mapping, got {dim!r}"
            )
        out[str(dim.name)] = dim.value
    return out


def _type_name(name: str, metric_type: MetricType) -> str:
    value = metric_type.value if isinstance(metric_type, MetricTypes) else metric_type
    if value not in METRIC_TYPES:
        raise ValueError(f"metric {name!r}: metric_type {metric_type!r} is not one of {list(METRIC_TYPES)}")
    return str(value)


def _check_value(name: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"metric {name!r}: value must be an int or float, got {type(value).__name__} {value!r}")


def _check_unit(what: str, unit: str, allowed: tuple[str, ...]) -> None:
    if unit not in allowed:
        raise ValueError(f"the unit of {what} must be one of {list(allowed)}, got {unit!r}")
