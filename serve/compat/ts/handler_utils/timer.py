"""`ts.handler_utils.timer.timed`: TorchServe's decorator timing a handler method into a metric.

When the model-config has `handler: {profile: true}`, each call of the decorated method records
`ts_handler_<method name>` in milliseconds with `context.metrics.add_time`; otherwise it only calls the method.
On a GPU the time includes waiting for the device (serve's synchronize), as TorchServe's CUDA events do.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import serve


def timed(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrap_func(self: Any, *args: Any, **kwargs: Any) -> Any:
        context = getattr(self, "context", None)
        config = getattr(context, "model_yaml_config", None) or {}
        if context is None or not (config.get("handler") or {}).get("profile"):
            return func(self, *args, **kwargs)
        start = time.perf_counter()
        result = func(self, *args, **kwargs)
        if serve.cuda.is_available():
            serve.cuda.synchronize()
        context.metrics.add_time("ts_handler_" + func.__name__, (time.perf_counter() - start) * 1000)
        return result

    return wrap_func
