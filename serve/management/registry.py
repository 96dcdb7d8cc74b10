"""`ModelRegistry`: the registered models and their versions, the one object the frontends talk to.

    registry = ModelRegistry(settings, metrics)
    await registry.start()                                  # load_models, or the snapshot to restore
    await registry.register("digits.mar", initial_workers=1)
    response = await registry.submit("digits", None, InferenceRequest(...))
    await registry.shutdown(timeout=30)

Messages and statuses are TorchServe's (spec sections 2.1-2.6). Decisions on its quirks:
- A failed synchronous registration answers with the handler's own error and last traceback frames (pain point
  5: TorchServe says "Worker died"), and the model is removed again, as in TorchServe. When the worker refused a
  file of the archive (a hostile or corrupt checkpoint: CheckpointError) it is InvalidModel, a 400 like every
  other archive problem, with the loader's message naming the file and no traceback.
- Unregistering without a version removes the default version; while other versions exist that is refused with
  403, as TorchServe does. The version's queued and running requests are answered first (up to
  unregister_model_timeout; then 408 and the rest fail with 503).
- `health()` is not ok while the startup models load, nor ever when one of them could not be registered; otherwise
  it is the health of every version (model_table.py).
- A 503 for a version with no worker carries the load error describe shows, when its workers failed to load; a
  request to a version whose every worker failed its last load is that 503 at once (TorchServe queues it).
- A synchronous scale that ends with no READY worker (though one was asked for) is that 503, not a 200.
Every change (register, unregister, scale, set-default) writes a config snapshot unless `ncs` is set.
Every request for workers passes the caps of serve/management/limits.py before anything is forked. What a
registration checks, in order, and undoes when it fails: registration.py. The versions and what is read off them
(lookups and their 404s, the list's pages, the snapshot, per-version health): model_table.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from pathlib import Path
from typing import Any

from serve.archive import shown
from serve.batching import DESCRIBE, InferenceRequest, InferenceResponse, Job
from serve.config import Settings
from serve.errors import ConfigError, InvalidInput, ModelLoadError, ModelNotFound, ModelNotReady, RequestTimeout
from serve.management.limits import check_worker_counts
from serve.management.model_table import ModelTable
from serve.management.model_version import ModelVersion, check_params
from serve.management.registration import Registrar, check_runtime, with_code, worker_names
from serve.management.sequences import SEQUENCE_ID
from serve.management.snapshot import write_snapshot
from serve.management.startup import check_snapshot_archives, load_models, snapshot_defaults, snapshot_models
from serve.management.workers import no_worker_error
from serve.metrics import ServerMetrics

log = logging.getLogger(__name__)


class ModelRegistry:
    """Registered model versions by name, their default versions, and the operations of the management API."""

    def __init__(self, settings: Settings, metrics: ServerMetrics) -> None:
        self.settings, self.metrics = settings, metrics
        self._table = ModelTable()
        self._registrar = Registrar(settings, metrics, self._table)
        self._closing = False
        self._starting = True  # until start() has loaded the startup models: /ping is not ready before that
        self._started = False  # start() registered the startup models: a shutdown snapshot then records the models
        self._refused: list[str] = []  # startup models that could not be registered: the start is refused

    # ---- lifecycle ---------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Register the startup models: the snapshot's when there is one (it replaces load_models, as in
        TorchServe), else load_models. Every one must register: one that cannot (its archive is missing, its
        model-config is refused) refuses the start with a ConfigError naming each such model, before any worker is
        waited for, and health() is never ok (TorchServe logs it and says Healthy with the model missing). Their
        workers then load in parallel; a model whose workers fail to load is logged and stays registered with its
        workers retrying (describe shows the error; /ping stays unhealthy until one is READY)."""
        snapshot = self.settings.model_snapshot
        jobs = snapshot_models(snapshot) if snapshot else load_models(self.settings)
        if snapshot:
            await check_snapshot_archives(jobs, self.settings)  # an archive gone: refuse to start, as TorchServe
        try:
            added = await asyncio.gather(*(self._add_at_startup(**job) for job in jobs), return_exceptions=True)
            registered = self._registered_or_refuse(jobs, added)
            await asyncio.gather(*(self._wait_at_startup(mv, started) for mv, started in registered))
            for name, version in snapshot_defaults(snapshot):
                if self._table.has(name, version):
                    self._table.set_default(name, version)
            self._save("startup")
            self._started = True
        finally:
            self._starting = False

    async def shutdown(self, timeout: float) -> None:
        """Stop accepting requests, answer the queued and running ones (bounded by `timeout`), stop every worker."""
        if self._started and not self._closing:
            self._save("shutdown")
        self._closing = True
        await asyncio.gather(*(mv.close(timeout) for mv in self._table.all()), return_exceptions=True)
        self._table.clear()

    async def _add_at_startup(self, url: str, model_name: str | None, workers: tuple[Any, Any] = (None, None),
                              **params: Any) -> tuple[ModelVersion, list[asyncio.Future[None]]]:  # fmt: skip
        """Register one startup model and start its workers; (the version, the workers started)."""
        mv = await self._registrar.add(url, model_name, None, params, loaded_at_startup=True)
        low, high = workers
        low = mv.config.min_workers if low is None else low
        high = max(low, mv.config.max_workers if high is None else high)
        try:
            return mv, self._scale(mv, ("minWorkers", low), ("maxWorkers", high))
        except InvalidInput:
            await self._remove(mv.name, mv.version)
            raise

    def _registered_or_refuse(self, jobs: list[dict[str, Any]], results: list[Any]) -> list[tuple[ModelVersion, list]]:
        """`_add_at_startup`'s results, or a ConfigError naming every startup model that could not be registered
        and why (see start)."""
        registered = []
        for job, result in zip(jobs, results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result
            if isinstance(result, Exception):
                named = f"{job['model_name']} ({job['url']})" if job["model_name"] else job["url"]
                self._refused.append(f"{named}: {result}")
            else:
                registered.append(result)
        if self._refused:
            raise ConfigError(f"startup model(s) could not be registered: {'; '.join(self._refused)}. Fix the archive "
                              "or its model-config, or leave the model out of --models/load_models (a snapshot's: "
                              "start with --ncs)")  # fmt: skip
        return registered

    async def _wait_at_startup(self, mv: ModelVersion, started: list) -> None:
        try:
            await mv.pool.wait_ready(started, None)
        except ModelLoadError as e:
            log.error("model %s version %s failed to load; its workers keep retrying: %s", mv.name, mv.version, e)

    # ---- management ------------------------------------------------------------------------------------------

    async def register(self, url: str, *, model_name: str | None = None, handler: str | None = None,
                       runtime: str | None = None, batch_size: int | None = None, max_batch_delay: int | None = None,
                       initial_workers: int | None = None, synchronous: bool = True,
                       response_timeout: int | None = None, startup_timeout: int | None = None,
                       local_path: Path | None = None, snapshot: bool = True) -> str:  # fmt: skip
        """Register the archive at `url`; TorchServe's status message (see spec section 2.1). The server's own
        callers (workflows) may give `local_path`, a model directory the server made, used as it is (not resolved
        against the model store; the model is not listed), and `snapshot=False` to keep the model out of
        snapshots."""
        if url is None:
            raise InvalidInput("Parameter url is required.")
        check_runtime(runtime)
        params = {"batch_size": batch_size, "max_batch_delay": max_batch_delay, "initial_workers": initial_workers,
                  "response_timeout": response_timeout, "startup_timeout": startup_timeout}  # fmt: skip
        check_params(params)
        mv = await self._registrar.add(url, model_name, handler, params, local_path=local_path, snapshot=snapshot)
        name, version = mv.name, mv.version
        low, high = worker_names(params)
        try:
            started = self._scale(mv, (low, mv.config.min_workers), (high, mv.config.max_workers))
        except InvalidInput:
            await self._remove(name, version)
            raise
        self._save()
        if not started:
            return (f'Model "{name}" Version: {version} registered with 0 initial workers. Use scale workers API to '
                    "add workers for the model.")  # fmt: skip
        if not synchronous:
            return "Processing worker updates..."
        try:
            await mv.pool.wait_ready(started, None)
        except ModelLoadError as e:  # InvalidModel (a refused checkpoint) stays one: a 400
            await self._remove(name, version)
            raise type(e)(f"Failed to start workers for model {name} version: {version}: {e}") from None
        return f'Model "{name}" Version: {version} registered with {len(started)} initial workers'

    async def unregister(self, name: str, version: str | None = None) -> str:
        versions = self._table.versions(name)
        version = self._table.default(name) if version is None else version
        if version not in versions:
            raise ModelNotFound(f"Model version: {shown(version)} does not exist for model: {name}")
        if version == self._table.default(name) and len(versions) > 1:
            raise with_code(InvalidInput(f"Cannot remove default version for model {name}; set another default "
                                         "version first, or remove the other versions"), 403)  # fmt: skip
        if not await self._remove(name, version):
            raise with_code(RequestTimeout(f"Timed out while cleaning resources: {name}"), 408)
        return f'Model "{name}" unregistered'

    async def scale(self, name: str, version: str | None, min_worker: int | None, max_worker: int | None,
                    synchronous: bool = False, timeout: float | None = None) -> str:  # fmt: skip
        """TorchServe's scale workers: min_worker defaults to 1, max_worker to min_worker."""
        mv = self._table.version(name, version)
        low = 1 if min_worker is None else min_worker
        high = low if max_worker is None else max_worker
        for key, value in (("min_worker", low), ("max_worker", high)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInput(f"Invalid {key} value: {value!r}; it must be an integer >= 0")
        if high < low:
            raise InvalidInput("max_worker cannot be less than min_worker.")
        started = self._scale(mv, ("min_worker", low), ("max_worker", high))
        self._save()
        if not synchronous:
            return "Processing worker updates..."
        try:
            loading = started + [s.ready for s in mv.pool.slots
                                 if not (s.stopping or s.ready.done() or s.ready in started)]  # fmt: skip
            ready = await mv.pool.wait_ready(loading, timeout if timeout is not None and timeout >= 0 else None)
        except ModelLoadError as e:
            raise type(e)(f"Failed to start workers for model {name} version: {mv.version}: {e}") from None
        if not ready:
            return "Workers scaling in progress..."
        if low > 0 and mv.pool.live == 0:  # the workers kept from before are (re)starting or failed: none serves
            raise no_worker_error(f'"{name}" Version {mv.version}', mv.pool.load_error())
        return f"Workers scaled to {low} for model: {name}" + (f", version: {version}" if version else "")

    def set_default(self, name: str, version: str) -> str:
        if version not in self._table.versions(name):
            raise ModelNotFound(f"Model version {shown(version)} does not exist for model {name}")
        self._table.set_default(name, version)
        self._save()
        return f'Default version successfully updated for model "{name}" to "{version}"'

    def model_config(self, name: str, version: str | None = None) -> dict[str, Any]:
        """The archive's model-config YAML (parsed) of a version (the default one when `version` is None)."""
        return dict(self._table.version(name, version).archive.model_config)

    def model_dir(self, name: str, version: str | None = None) -> Path:
        """The directory the version's archive was extracted to (its extra files: a label file, say)."""
        return Path(self._table.version(name, version).archive.model_dir)

    def describe(self, name: str, version: str | None = None, all_versions: bool = False) -> list[dict[str, Any]]:
        if all_versions:
            return [mv.describe() for mv in self._table.versions(name).values()]
        return [self._table.version(name, version).describe()]

    async def describe_custom(self, name: str, version: str | None) -> list[dict[str, Any]]:
        """Describe plus `customizedMetadata`: the handler's describe_handle() run on a worker (never batched)."""
        mv = self._table.version(name, version)
        if not mv.pool.can_serve():
            raise ModelNotReady(f'Model "{name}" has no worker to serve describe request. Please use scale workers '
                                "API to add workers.")  # fmt: skip
        job = Job.create(InferenceRequest(str(uuid.uuid4()), {}), kind=DESCRIBE)
        mv.queue.put(job)
        response = await job.future
        entry = mv.describe()
        entry["customizedMetadata"] = _json_object(response)
        return [entry]

    def list_models(self, limit: int = 100, next_page_token: int = 0) -> dict[str, Any]:
        """One page of the default versions (model_table.py; the dataplane checks the arguments)."""
        return self._table.page(limit, next_page_token)

    # ---- inference ---------------------------------------------------------------------------------------------

    async def submit(self, name: str, version: str | None, request: InferenceRequest) -> InferenceResponse:
        """Queue the request on the version's workers and wait for its answer. ModelNotFound, ModelNotReady,
        QueueFull (at once), RequestTimeout, WorkerError, or PredictionException (the handler failed the batch)."""
        mv = self._table.version(name, version)
        if self._closing or not mv.pool.can_serve() or mv.pool.loading_fails():
            raise no_worker_error(f'"{name}"' + (f" Version {version}" if version else ""), mv.pool.load_error())
        job = Job.create(request)
        if mv.sequences is not None:  # a stateful model: the job goes to its sequence's worker
            sequence_id = mv.sequences.submit(job)
            response = await job.future
            response.headers.setdefault(SEQUENCE_ID, sequence_id)
            return response
        mv.queue.put(job)
        self.metrics.queue_depth(name, mv.version, len(mv.queue))
        return await job.future  # a cancelled caller cancels the job: the batcher drops it

    def health(self) -> tuple[bool, dict[str, Any]]:
        """(healthy, per model and version: status, live and minimum workers, the load error). Not healthy while
        the startup models are still loading, nor while a startup model version that should have workers has no
        READY one (its handler fails to load: its workers crash-loop), so a readiness probe on /ping keeps traffic
        away until every startup model can answer. A version registered later is unhealthy only once all of its
        workers gave up restarting."""
        if self._refused:
            return False, {"status": f"Unhealthy: startup model(s) could not be registered: {'; '.join(self._refused)}"}
        if self._starting:
            return False, {"status": "Starting: the startup models are loading"}
        return self._table.health()

    def snapshot(self) -> dict[str, Any]:
        """TorchServe's snapshot `models` structure: {name: {version: {defaultVersion, marName, ...}}}."""
        return self._table.snapshot()

    # ---- internals ---------------------------------------------------------------------------------------------

    async def _remove(self, name: str, version: str) -> bool:
        """Take the version out of routing, then drain and close it; False when draining timed out."""
        mv = self._table.pop(name, version)
        self._save()
        drained = await mv.close(self.settings.unregister_model_timeout)
        self._registrar.release(mv)
        self.metrics.remove_model(name, version)
        return drained

    def _scale(self, mv: ModelVersion, low: tuple[str, int], high: tuple[str, int]) -> list[asyncio.Future[None]]:
        """Scale `mv` to (low, high) once the worker caps allow it (InvalidInput naming the cap otherwise)."""
        check_worker_counts(self.settings, f"model {mv.name} version {mv.version}", low, high,
                            current=mv.pool.active, others=self._table.workers_except(mv))  # fmt: skip
        return mv.scale(low[1], high[1])

    def _save(self, kind: str = "snapshot") -> None:
        if self.settings.ncs or self._closing:
            return
        try:
            write_snapshot(self.settings.snapshot_dir, self.snapshot(), kind)
        except (OSError, ConfigError) as e:
            log.warning("could not write the config snapshot to %s: %s", self.settings.snapshot_dir, e)


def _json_object(response: InferenceResponse) -> dict[str, Any]:
    """The handler's describe output as a JSON object ({} for anything else, as TorchServe)."""
    try:
        value = json.loads(response.body or b"null")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
