"""`ModelVersion`: one registered model version: its archive, its settings, its job queue and worker pool, and the
JSON that describe and snapshots show of it.

Settings, lowest priority first (TorchServe's order): the server's defaults (`batch_size`, `max_batch_delay`,
`default_response_timeout`, `default_startup_timeout`, `default_workers_per_model`, `job_queue_size`) <
config.properties `models` {name: {version: {...}}} < the archive's model-config YAML (`minWorkers`, `maxWorkers`,
`batchSize`, `maxBatchDelay`, `responseTimeout`, `startupTimeout`, `jobQueueSize`, `maxRetryTimeoutInSec`,
`deviceType`, `deviceIds`) < the register request's parameters. Decisions:
- TorchServe lets the YAML's responseTimeout/startupTimeout win over the request's parameters (a quirk); here the
  request wins, like every other parameter.
- `initial_workers` sets both min and max workers; the YAML's pair applies only when maxWorkers >= minWorkers.
- A YAML value of the wrong type or range is ignored with a warning naming it, as in TorchServe.
- TorchServe keys serve does not implement are refused (400) when they would change behaviour, else warned about
  and listed in describe's `ignoredConfigKeys` (serve/management/config_keys.py).

Ours (TorchServe has neither), checked at registration, a bad value refused with 400:
- `dtype: float32 | float16 | bfloat16` (default float32): the handler converts the model's floating-point
  weights to it at load (`model.half()` / `model.bfloat16()`) and its floating inputs before each forward pass;
  the outputs come back as float32 to postprocess, so answers are formatted as before. Describe shows it.
- `quantization: int8` (default none): the CPU inference plan's linear layers run dynamically quantised int8
  products where the CPU has AVX512-VNNI (serve.inference.optimize(quantization=)); not beside a half `dtype`.
  Describe shows it when set.
- `gpuMemoryFraction: f` (0 < f <= 1): the share of its GPU's memory a worker's CuPy pool may hold
  (`serve.cuda.set_per_process_memory_fraction`); by default the pool is not capped.
- `optimize: true | false` (default true) and `optimize_warmup_s: seconds` (default 30): whether the workers run
  the model's inference plan (serve/inference) and how long each may warm it up before it reports ready
  (serve/worker/optimizing.py). Describe shows per worker whether it runs optimized and why not.
- `workerMemoryLimit: bytes` (also in the `models` property; 0: none): the resident memory a worker may hold after
  a batch before it is replaced; beats `worker_memory_limit`, whose default is a share of the host's memory
  (serve/management/memory.py). Describe shows the limit in force now (0: none).
- `continuousMaxInFlight: n` (default 256): for a handler that runs in continuous mode (`continuous = True`, which
  TorchServe's `continuousBatching: true` asks for), how many requests each worker holds at once; the rest wait in
  the job queue (serve/management/continuous.py).
GPUs: the workers take `deviceIds` (each in 0..number_of_gpu-1; anything else is ignored with a warning and every
GPU is used), else every GPU, in turn (round-robin), as TorchServe; `deviceType: cpu`, or number_of_gpu = 0, runs
them on the CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from serve.archive import ModelArchive
from serve.batching import Batcher, JobQueue
from serve.config import Settings
from serve.errors import InvalidInput, ModelNotReady
from serve.management.config_keys import unsupported_keys
from serve.management.continuous import DEFAULT_MAX_IN_FLIGHT
from serve.management.memory import MemoryLimit
from serve.management.requirements import remove_deps
from serve.management.sequences import SequenceRouter, SequenceSettings, sequence_settings
from serve.management.worker_process import WorkerSpec
from serve.management.worker_slot import PoolSettings
from serve.management.workers import WorkerPool
from serve.metrics import ServerMetrics
from serve.worker.optimizing import optimize_settings

log = logging.getLogger(__name__)

# model-config YAML / `models` key -> (VersionConfig field, smallest valid value)
CONFIG_KEYS = {
    "minWorkers": ("min_workers", 0),
    "maxWorkers": ("max_workers", 0),
    "batchSize": ("batch_size", 1),
    "maxBatchDelay": ("max_batch_delay", 0),
    "responseTimeout": ("response_timeout", 1),
    "startupTimeout": ("startup_timeout", 1),
    "jobQueueSize": ("job_queue_size", 1),
    "maxRetryTimeoutInSec": ("max_retry_timeout", 0),
    "workerMemoryLimit": ("memory_limit", 0),
    "continuousMaxInFlight": ("max_in_flight", 1),
}
DEFAULT_MAX_RETRY_S = 300
DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class VersionConfig:
    min_workers: int
    max_workers: int
    batch_size: int
    max_batch_delay: int  # ms
    response_timeout: int  # s
    startup_timeout: int  # s
    job_queue_size: int
    max_retry_timeout: int = DEFAULT_MAX_RETRY_S  # s
    gpu_ids: tuple[int, ...] = ()
    threads: int | None = None
    dtype: str = "float32"
    quantization: str | None = None
    gpu_memory_fraction: float | None = None
    optimize: bool = True
    memory_limit: int | None = None  # bytes per worker (0: none; None: worker_memory_limit, or its default)
    ignored_keys: tuple[str, ...] = ()  # TorchServe model-config keys serve ignores (config_keys.py)
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT  # requests sent and unanswered per continuous worker
    sequence: SequenceSettings | None = None  # sequenceBatching: true (serve/management/sequences.py)


def resolve_config(settings: Settings, name: str, version: str, yaml: Mapping[str, Any],
                   params: Mapping[str, int | None]) -> VersionConfig:  # fmt: skip
    """The version's settings from the four sources, lowest priority first (see the module docstring)."""
    workers = settings.default_workers_per_model
    values: dict[str, Any] = {
        "min_workers": workers, "max_workers": workers, "batch_size": settings.batch_size,
        "max_batch_delay": settings.max_batch_delay, "response_timeout": settings.default_response_timeout,
        "startup_timeout": settings.default_startup_timeout, "job_queue_size": settings.job_queue_size,
    }  # fmt: skip
    entry = (settings.models.get(name) or {}).get(version) or {}
    values.update(_known(entry, f"config.properties models[{name}][{version}]"))
    values.update(_known(yaml, f"model-config of {name} version {version}"))
    if values["max_workers"] < values["min_workers"]:
        log.warning("model %s: maxWorkers %d < minWorkers %d; using %d for both", name, values["max_workers"],
                    values["min_workers"], values["min_workers"])  # fmt: skip
        values["max_workers"] = values["min_workers"]
    if params.get("initial_workers") is not None:
        values["min_workers"] = values["max_workers"] = params["initial_workers"]
    for key in ("batch_size", "max_batch_delay", "response_timeout", "startup_timeout"):
        if params.get(key) is not None:
            values[key] = params[key]
    where = f"model-config of {name} version {version}"
    ignored = unsupported_keys(yaml, where)
    return VersionConfig(
        **values,
        gpu_ids=_gpu_ids(settings, yaml, where),
        threads=_threads(yaml),
        dtype=model_dtype(yaml, where),
        quantization=model_quantization(yaml, where),
        gpu_memory_fraction=_memory_fraction(yaml, where),
        optimize=_optimize(yaml, where),
        ignored_keys=ignored,
        sequence=sequence_settings(yaml, where),
    )


def check_params(params: Mapping[str, int | None]) -> None:
    """Refuse out-of-range register parameters (TorchServe silently falls back to defaults)."""
    lowest = {"batch_size": 1, "max_batch_delay": 0, "initial_workers": 0, "response_timeout": 1, "startup_timeout": 1}
    for key, value in params.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < lowest[key]):
            raise InvalidInput(f"Invalid {key} value: {value!r}; it must be an integer >= {lowest[key]}")


def _known(source: Mapping[str, Any], where: str) -> dict[str, int]:
    out = {}
    for key, (field, lowest) in CONFIG_KEYS.items():
        value = source.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            log.warning("%s: ignoring %s=%r (expected an integer >= %d)", where, key, value, lowest)
            continue
        out[field] = value
    return out


def _gpu_ids(settings: Settings, yaml: Mapping[str, Any], where: str) -> tuple[int, ...]:
    """GPUs the workers take in turn: none on a CPU server or with `deviceType: cpu`; `deviceIds` when given."""
    if settings.number_of_gpu <= 0 or yaml.get("deviceType") == "cpu":
        return ()
    ids = yaml.get("deviceIds")
    n = settings.number_of_gpu
    if isinstance(ids, list) and ids and all(type(i) is int and 0 <= i < n for i in ids):
        return tuple(ids)
    if ids is not None:
        log.warning("%s: ignoring deviceIds=%r (expected a list of GPU ids in 0..%d); using every GPU",
                    where, ids, n - 1)  # fmt: skip
    return tuple(range(n))


def model_dtype(yaml: Mapping[str, Any], where: str) -> str:
    """The model-config's `dtype` (ours), float32 when absent; InvalidInput (400) for anything else."""
    value = yaml.get("dtype")
    if value is None:
        return "float32"
    if value not in DTYPES:
        raise InvalidInput(f"{where}: dtype {value!r} is not valid: expected one of {', '.join(DTYPES)}")
    return str(value)


def model_quantization(yaml: Mapping[str, Any], where: str) -> str | None:
    """The model-config's `quantization` (ours): None or "int8", and not with a half dtype; InvalidInput (400)."""
    value = yaml.get("quantization")
    if value is None:
        return None
    if value != "int8":
        raise InvalidInput(f"{where}: quantization {value!r} is not valid: use int8, or leave it out for float32")
    if yaml.get("dtype") not in (None, "float32"):
        raise InvalidInput(f"{where}: quantization int8 with dtype {yaml.get('dtype')!r}: choose one")
    return "int8"


def _memory_fraction(yaml: Mapping[str, Any], where: str) -> float | None:
    """The model-config's `gpuMemoryFraction` (ours); InvalidInput (400) unless 0 < value <= 1."""
    value = yaml.get("gpuMemoryFraction")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise InvalidInput(f"{where}: gpuMemoryFraction {value!r} is not valid: expected a number > 0 and <= 1 "
                           "(the share of the GPU's memory each worker may use)")  # fmt: skip
    return float(value)


def _optimize(yaml: Mapping[str, Any], where: str) -> bool:
    """The model-config's `optimize` (and `optimize_warmup_s`), ours; InvalidInput (400) for a wrong type."""
    try:
        return optimize_settings(yaml).enabled
    except ValueError as e:
        raise InvalidInput(f"{where}: {e}") from None


def _threads(yaml: Mapping[str, Any]) -> int | None:
    """TorchServe's `torchrun: {OMP_NUMBER_THREADS: n}`: the worker's CPU lanes; None leaves serve's default."""
    torchrun = yaml.get("torchrun")
    n = torchrun.get("OMP_NUMBER_THREADS") if isinstance(torchrun, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


class ModelVersion:
    """One model version: archive, settings, queue, batcher and worker pool."""

    def __init__(self, name: str, archive: ModelArchive, url: str, config: VersionConfig, settings: Settings,
                 metrics: ServerMetrics, next_id: Callable[[], str], *, handler: str | None = None,
                 loaded_at_startup: bool = False, downloaded: Path | None = None,
                 workers_running: Callable[[], int] | None = None, deps_dir: Path | None = None) -> None:  # fmt: skip
        self.name, self.archive, self.url, self.config = name, archive, url, config
        self.deps_dir = deps_dir  # its installed requirements (serve/management/requirements.py), removed on close
        self.version = archive.model_version
        self.loaded_at_startup, self.downloaded = loaded_at_startup, downloaded
        full = (f'Model "{name}" Version: {self.version} has {config.job_queue_size} requests waiting: its job '
                "queue is full; retry later, or raise jobQueueSize in the model-config (job_queue_size)")  # fmt: skip
        self.queue = JobQueue(config.job_queue_size, full_message=full)
        self.batcher = Batcher(self.queue, config.batch_size, config.max_batch_delay)
        spec = WorkerSpec(name, self.version, archive.model_dir.resolve(), handler, config.batch_size,
                          config.startup_timeout, settings.max_request_size, settings.max_response_size,
                          settings.limit_max_image_pixels, config.threads, settings.worker_heartbeat_interval,
                          settings.worker_heartbeat_misses, settings.metrics_config, deps_dir)  # fmt: skip
        pool_settings = PoolSettings(config.response_timeout, config.max_retry_timeout,
                                     settings.unregister_model_timeout, config.gpu_ids,
                                     config.max_in_flight)  # fmt: skip
        configured = settings.worker_memory_limit if config.memory_limit is None else config.memory_limit
        memory_limit = MemoryLimit(configured, workers_running or (lambda: self.pool.active))
        self.pool = WorkerPool(spec, self.queue, self.batcher, metrics, pool_settings, next_id, memory_limit)
        self.sequences: SequenceRouter | None = None
        if config.sequence is not None:  # before any worker starts: each gets its own queue
            self.pool.pin_sequences()
            self.sequences = SequenceRouter(name, self.version, config.sequence, self.pool.sequence_slots)

    def scale(self, min_workers: int, max_workers: int) -> list[asyncio.Future[None]]:
        self.config = replace(self.config, min_workers=min_workers, max_workers=max_workers)
        return self.pool.scale(min_workers, max_workers)

    async def close(self, timeout: float) -> bool:
        """Finish the queued and running requests (up to `timeout` s), stop the workers, remove the extracted files
        (and a downloaded archive). False when requests were still pending at the timeout (they fail)."""
        drained = True
        if self.pool.can_serve():
            try:
                async with asyncio.timeout(timeout):
                    await self.queue.drained()
                    if self.sequences is not None:
                        await self.sequences.drained()
            except TimeoutError:
                drained = False
        if self.sequences is not None:
            self.sequences.close(lambda: ModelNotReady(f"Model {self.name} version {self.version} was unregistered"))
        await self.pool.stop(timeout if drained else 5.0)
        self.queue.fail_all(lambda: ModelNotReady(f"Model {self.name} version {self.version} was unregistered"))
        await asyncio.to_thread(self._remove_files)
        return drained

    def _remove_files(self) -> None:
        self.archive.close()
        remove_deps(self.deps_dir)
        if self.downloaded is not None:
            with contextlib.suppress(OSError):
                self.downloaded.unlink()

    def describe(self) -> dict[str, Any]:
        """TorchServe's describe element (spec section 2.3), its field order, null fields left out."""
        c = self.config
        out: dict[str, Any] = {
            "modelName": self.name, "modelVersion": self.version, "modelUrl": self.url,
            "runtime": self.archive.runtime, "minWorkers": c.min_workers, "maxWorkers": c.max_workers,
            "batchSize": c.batch_size, "maxBatchDelay": c.max_batch_delay, "responseTimeout": c.response_timeout,
            "startupTimeout": c.startup_timeout, "maxRetryTimeoutInSec": c.max_retry_timeout,
            "clientTimeoutInMills": 0, "parallelType": "", "parallelLevel": 0,
            "deviceType": "gpu" if c.gpu_ids else "cpu",
        }  # fmt: skip
        if c.gpu_ids:
            out["deviceIds"] = list(c.gpu_ids)
        out["dtype"] = c.dtype
        if c.quantization is not None:
            out["quantization"] = c.quantization
        out["workerMemoryLimit"] = self.pool.memory_limit.bytes() or 0
        if c.gpu_memory_fraction is not None:
            out["gpuMemoryFraction"] = c.gpu_memory_fraction
        if c.ignored_keys:
            out["ignoredConfigKeys"] = list(c.ignored_keys)
        out.update({
            "continuousBatching": self.pool.continuous, "useJobTicket": False, "useVenv": False, "stateful": False,
            "sequenceMaxIdleMSec": 0, "sequenceTimeoutMSec": 0, "maxNumSequence": 1, "maxSequenceJobQueueSize": 1,
            **(self.sequences.describe() if self.sequences is not None else {}),
            "loadedAtStartup": self.loaded_at_startup, "workers": self.pool.describe_workers(),
            "jobQueueStatus": {"remainingCapacity": self.queue.remaining_capacity, "pendingRequests": len(self.queue)},
        })  # fmt: skip
        return out

    def snapshot_entry(self, default: bool) -> dict[str, Any]:
        """TorchServe's per-version snapshot entry."""
        c = self.config
        return {"defaultVersion": default, "marName": self.url, "minWorkers": c.min_workers,
                "maxWorkers": c.max_workers, "batchSize": c.batch_size, "maxBatchDelay": c.max_batch_delay,
                "responseTimeout": c.response_timeout, "startupTimeout": c.startup_timeout}  # fmt: skip
