"""`start_default_metrics(metrics, settings)`: TorchServe's default metrics as config.properties asks for them.

- `metrics_config`: which of TorchServe's default metrics are kept (default_metrics.py); a file that declares one
  with other dimensions is a ConfigError naming it.
- `metrics_mode`: `prometheus` (serve's default) only fills `/metrics`; `log` (TorchServe's default) and `legacy`
  also write every update to `{log_location}/ts_metrics.log` and `model_metrics.log` (metrics_log.py). What
  `/metrics` shows in each mode is the router's (frontends/http/routers/metrics.py): everything, nothing, or
  TorchServe's three `ts_*` counters.
- `disable_system_metrics` / `metric_time_interval`: the host gauges (system_metrics.py) sampled every interval
  by a thread, the disk being the model store's; in log modes each sample is logged, with the GPU gauges.
Returns the sampler (the caller stops it when the server stops), None when system metrics are disabled.
"""

from __future__ import annotations

from pathlib import Path

from serve.config import Settings
from serve.errors import ConfigError
from serve.metrics.default_metrics import default_metrics
from serve.metrics.metrics_log import MetricsLog
from serve.metrics.server_metrics import ServerMetrics
from serve.metrics.system_metrics import Sample, SystemMetrics

LOG_MODES = ("log", "legacy")


def start_default_metrics(metrics: ServerMetrics, settings: Settings) -> SystemMetrics | None:
    try:
        defaults = default_metrics(settings.metrics_config)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    log = None
    if settings.metrics_mode in LOG_MODES:
        log = MetricsLog.to_files(metrics.hostname, settings.log_location, defaults)
    metrics.configure(defaults, log)
    if settings.disable_system_metrics:
        return None

    def logged(values: Sample) -> None:
        if log is not None:
            log.host(values)
            log.families(metrics.gpu_families())

    system = SystemMetrics(metrics.hostname, settings.model_store or Path.cwd(), settings.metric_time_interval,
                           logged if log is not None else None)  # fmt: skip
    metrics.watch_system(system)
    system.start()
    return system
