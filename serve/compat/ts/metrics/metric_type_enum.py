"""`ts.metrics.metric_type_enum`: MetricTypes (COUNTER, GAUGE, HISTOGRAM), the one serve's metrics cache takes."""

from serve.worker.metrics_cache import MetricTypes

__all__ = ["MetricTypes"]
