"""serve.metrics: the server's Prometheus metrics under TorchServe's names (`ServerMetrics`), one registry each."""

from serve.metrics.server_metrics import LEGACY_NAMES, ServerMetrics

__all__ = ["LEGACY_NAMES", "ServerMetrics"]
