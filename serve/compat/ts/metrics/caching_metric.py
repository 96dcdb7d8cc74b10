"""`ts.metrics.caching_metric`: CachingMetric, what `context.metrics.add_metric_to_cache` returns."""

from serve.worker.metrics_cache import CachingMetric

__all__ = ["CachingMetric"]
