"""`ts.metrics.dimension`: Dimension(name, value), accepted wherever serve's metrics cache takes dimensions."""

from serve.worker.metrics_cache import Dimension

__all__ = ["Dimension"]
