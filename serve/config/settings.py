"""`Settings`: every server setting, typed, named as TorchServe's `config.properties` keys.

Defaults are TorchServe's except where a comment says otherwise (each such choice is deliberate):
- `default_workers_per_model` is 1 (TorchServe: 0, which means one worker per CPU for startup models).
- `allowed_urls` is empty: only archives inside `model_store` may be registered (TorchServe's default
  `file://.*|http(s)?://.*` lets anyone with the management API fetch any URL, CVE-2023-43654).
- `metrics_mode` is `prometheus`, so `/metrics` is populated out of the box (TorchServe: `log`, empty `/metrics`).
- `number_of_gpu` defaults, as TorchServe's, to the GPUs visible to CUDA (nvidia-smi's list, restricted by
  `CUDA_VISIBLE_DEVICES`; 0 without nvidia-smi). A configured value above that is capped with a warning; one set
  where nvidia-smi cannot answer is kept as given (it cannot be checked). See serve/config/gpus.py.

Fields below the `--- not TorchServe keys ---` line come from the command line or the environment, or are ours.
Ours include the worker caps `max_workers_per_model` (default 2 x the CPUs this process may use) and
`max_workers` (default 4 x those CPUs), so no request can fork the host out of memory.
Build it with `serve.config.load_settings`; constructing it directly (tests, embedding) skips validation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Settings:
    # listeners: http(s)://host[:port]; https needs private_key_file and certificate_file (PEM)
    inference_address: str = "http://127.0.0.1:8080"
    management_address: str = "http://127.0.0.1:8081"
    metrics_address: str = "http://127.0.0.1:8082"
    private_key_file: Path | None = None
    certificate_file: Path | None = None
    # gRPC (issue 7)
    grpc_inference_port: int = 7070
    grpc_management_port: int = 7071
    grpc_inference_address: str = "127.0.0.1"
    grpc_management_address: str = "127.0.0.1"
    enable_grpc_ssl: bool = False
    grpc_server: str = "serve"  # "serve": our asyncio HTTP/2 server (frontends/grpc/native.py); "grpcio": grpc.aio

    # models
    model_store: Path | None = None
    workflow_store: Path | None = None  # where POST /workflows finds .war files (None: the model store)
    load_models: tuple[str, ...] = ()  # ("all",) or archive / "name=archive" entries (values.split_model_entry)
    # per-model overrides {name: {version: {defaultVersion, marName, minWorkers, maxWorkers, batchSize, ...}}}
    models: dict[str, Any] = field(default_factory=dict)
    # TorchServe's snapshot structure {"name", "modelCount", "models"} to restore on start (None: nothing to
    # restore). As in TorchServe, a snapshot replaces load_models at startup.
    model_snapshot: dict[str, Any] | None = None
    default_workers_per_model: int = 1  # TorchServe: 0 (= #CPUs at startup); 0 here registers with no workers
    default_service_handler: str | None = None  # the handler of archives whose manifest names none

    # queues, sizes and timeouts
    job_queue_size: int = 100
    max_request_size: int = 6553500  # bytes
    max_response_size: int = 6553500  # bytes
    default_response_timeout: int = 120  # s, per batch
    default_startup_timeout: int = 120  # s, model load
    unregister_model_timeout: int = 120  # s
    batch_size: int = 1  # registration default when neither the request nor the archive sets one
    max_batch_delay: int = 100  # ms, same

    # security
    allowed_urls: tuple[str, ...] = ()  # regexes (full match, case-insensitive) for register URLs outside model_store
    use_env_allowed_urls: bool = False  # TS_ALLOWED_URLS is read only when this is true
    disable_token_authorization: bool = False
    token_expiration_min: float = 60
    enable_model_api: bool = False
    cors_allowed_origin: str | None = None
    cors_allowed_methods: str | None = None
    cors_allowed_headers: str | None = None

    # metrics and handlers
    # "prometheus": all on /metrics; "log": none there, all in {log_location}/ts_metrics.log and model_metrics.log;
    # "legacy": TorchServe's three ts_* counters on /metrics, the rest logged (serve/metrics/metrics_log.py)
    metrics_mode: str = "prometheus"
    # TorchServe's metrics YAML: its model_metrics are made in every worker's metrics cache before the handler
    # loads (serve/metrics/metrics_config.py); TorchServe's default metrics it does not declare are not exported
    # (serve/metrics/default_metrics.py)
    metrics_config: Path | None = None
    metric_time_interval: int = 60  # s between samples of the host metrics (serve/metrics/system_metrics.py)
    disable_system_metrics: bool = False
    enable_metrics_api: bool = True
    decode_input_request: bool = True  # JSON/text bodies decoded for the handler (TorchServe's worker does it)
    limit_max_image_pixels: bool = True
    number_of_gpu: int = 0  # load_settings: the visible GPUs unless configured (TorchServe's default)
    enable_envvars_config: bool = False
    # pip-install an archive's requirementsFile for its workers only, at registration (serve/management/requirements.py)
    install_py_dep_per_model: bool = False

    # --- not TorchServe keys ---
    key_file: Path = Path("key_file.json")  # token keys (TorchServe: ./key_file.json, fixed)
    log_location: Path = Path("logs")  # env LOG_LOCATION, as TorchServe
    snapshot_dir: Path = Path("logs") / "config"  # {log_location}/config, as TorchServe
    ncs: bool = False  # --ncs / --no-config-snapshots: neither restore nor write snapshots
    log_config: Path | None = None  # --log-config: a Python logging config (JSON dictConfig or INI fileConfig)
    log_format: str = "text"  # "text" (later "json")
    config_file: Path | None = None  # the config.properties that was read, for the startup log
    # the UUID of the GPU behind each CUDA device 0..number_of_gpu-1 (found by load_settings; for GPU metrics)
    gpu_uuids: tuple[str, ...] = ()
    # caps on worker processes, checked before any is started (serve/management/limits.py): per model version,
    # and over all models and versions together
    max_workers_per_model: int = field(default_factory=lambda: 2 * usable_cpus())
    max_workers: int = field(default_factory=lambda: 4 * usable_cpus())
    # HTTP connection limits per listener (serve/frontends/http/connection_limits.py): request header bytes per
    # line and in all, header lines, seconds to send the headers, idle keep-alive seconds, connections waiting
    max_header_line_size: int = 16 * 1024
    max_header_size: int = 64 * 1024
    max_header_count: int = 100
    header_read_timeout: float = 10
    keep_alive_timeout: float = 5
    max_idle_connections: int = 1000
    # client connections of the process, REST and gRPC together; 0: the soft RLIMIT_NOFILE less a reserve
    max_connections: int = 0
    # where the server writes the ports it listens on as JSON once bound (None: nowhere); with port 0 in an address
    # or grpc_*_port the system picks a free port, and this file says which
    ports_file: Path | None = None
    # bytes extracted from archives across all registered model versions (serve/management/urls.py)
    max_extracted_bytes_total: int = 64 * 1024**3
    # a worker whose resident memory passes this many bytes after a batch is replaced (serve/management/memory.py);
    # None: 80% of the memory the server may use shared by the workers running; 0: no limit. Model-config
    # `workerMemoryLimit` overrides it per model version
    worker_memory_limit: int | None = None
    # each worker beats every worker_heartbeat_interval s; one silent for interval x misses s is hung: it is killed
    # and replaced (serve/management/worker_process.py)
    worker_heartbeat_interval: float = 5
    worker_heartbeat_misses: int = 4
