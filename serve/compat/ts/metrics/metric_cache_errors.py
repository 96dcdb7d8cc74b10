"""`ts.metrics.metric_cache_errors`: the errors TorchServe's metrics cache raises, as serve's raises them."""

from serve.worker.metrics_cache import MetricsCacheKeyError


class MetricsCacheError(Exception):
    """TorchServe's base of the metrics cache errors (serve raises TypeError/ValueError for bad arguments)."""


MetricsCacheTypeError = TypeError
MetricsCacheValueError = ValueError

__all__ = ["MetricsCacheError", "MetricsCacheKeyError", "MetricsCacheTypeError", "MetricsCacheValueError"]
