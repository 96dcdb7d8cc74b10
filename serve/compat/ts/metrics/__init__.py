"""`ts.metrics`: TorchServe's metric names. The cache itself is `context.metrics` (serve.worker.metrics_cache)."""
