"""serve.worker: where the serving stack meets the runtime. `Context` (what a handler knows about its model and
batch), the metrics a handler records, handler loading (TorchServe's entry point resolution) and the torch
compatibility that lets an unmodified PyTorch model file run on serve.
"""

from serve.worker.context import Context, RequestProcessor
from serve.worker.handler_loader import load_from_archive, load_handler, resolve_handler
from serve.worker.metrics_cache import MetricRecord, MetricsCache
from serve.worker.torch_compat import torch_compat, torch_compat_enabled

__all__ = [
    "Context",
    "MetricRecord",
    "MetricsCache",
    "RequestProcessor",
    "load_from_archive",
    "load_handler",
    "resolve_handler",
    "torch_compat",
    "torch_compat_enabled",
]
