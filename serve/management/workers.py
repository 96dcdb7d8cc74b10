"""`WorkerPool`: the worker processes of one model version, each with its batch loop and its restarts.

    pool = WorkerPool(spec, queue, batcher, metrics, PoolSettings(...), next_id)
    ready = pool.scale(min_workers=2, max_workers=2)      # starts / stops workers; futures of the new ones
    await pool.wait_ready(ready, timeout)                 # ModelLoadError with the handler's error
    await pool.stop(timeout)

Each worker has a slot with one task: start the process, then loop (wait for a job, take a batch with the Batcher,
run it, answer its jobs), and when the process dies or is recycled (response timeout) start it again. Restarts
follow TorchServe's back-off (0, 1, 1, 2, 3, 5, 8, ... s; reset after a successful load) for as long as the slot
has been failing less than `max_retry_timeout` s (model-config `maxRetryTimeoutInSec`, 300); then it stays FAILED,
`healthy()` turns False, and if no worker of the pool is left to serve, every queued job fails with 503 at once.
While every worker's last load failed (a handler that crash-loops), queued and new jobs are answered 503 at once
with the load error too (`loading_fails()`), instead of waiting for a load that keeps failing.

Misbehaving workers are replaced, and each replacement is counted in `ts_worker_restarts_total` by reason:
- unresponsive: a READY worker that sends no heartbeat for `worker_heartbeat_interval` x `worker_heartbeat_misses`
  s (SIGSTOP, a deadlock, native code holding the GIL) is killed by its handle (worker_process.py); the batch it
  held fails with "Worker died. ... sent no heartbeat ..." (500), which describe shows as `lastError`, and a new
  worker starts (a failure: TorchServe's back-off applies). A long batch keeps beating; `response_timeout` ends it.
- memory: after each batch it answered, a worker whose RSS is over its limit (memory.py) is stopped (it holds no
  job then: no request is lost, queued ones wait for the new worker) and started again at once, with a warning
  saying how much it held. Not a failure: no back-off.
- response_timeout, died: the existing paths below.
Each READY worker's RSS is on /metrics as `ts_worker_memory_bytes` (serve/metrics/worker_metrics.py).

Worker states in describe: READY, STARTING (loading), RESTARTING (waiting out a back-off after a failure),
UNLOADING (stopping), FAILED (gave up). TorchServe shows only READY and UNLOADING. Scaling, as in TorchServe,
starts workers until there are `min_workers` and stops them while there are more than `max_workers`; nothing
autoscales in between. Scale-down lets a busy worker finish its batch first. How many workers may be asked for is
capped before the pool is called (serve/management/limits.py).

Bounded start rate: at most `START_CONCURRENCY` (4) workers of a pool are starting (forked and loading the model)
at any time; a slot beyond that waits, in state STARTING, until one of the starting workers is READY or has
failed, so even an allowed scale-up by dozens never forks dozens at once. Restarts take their turn the same way.
A slot scaled away while it waits is never started.

GPUs: each new worker takes the next of the version's `gpu_ids` (round-robin, as TorchServe), kept across its
restarts. Describe's `gpuUsage` is `gpuId::N` alone: TorchServe appends nvidia-smi's utilization and memory
there (running nvidia-smi on every describe); here those are the GPU gauges on /metrics.
Ours, after TorchServe's fields: `optimized` (the worker's model runs its inference plan), `optimizeReason` (why
not, else null) and `warmedBatchSizes` (the batch sizes planned before the worker reported ready); see
serve/worker/optimizing.py.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from serve.batching import Batcher, JobQueue
from serve.errors import ModelLoadError, ModelNotReady, WorkerError
from serve.management.batch_statistics import batch_times
from serve.management.continuous import DEFAULT_MAX_IN_FLIGHT, ContinuousDispatch
from serve.management.dispatch import run_batch
from serve.management.memory import MemoryLimit, mib
from serve.management.worker_process import READY, STARTING, STOPPED, UNLOADING, WorkerProcess, WorkerSpec
from serve.metrics import ServerMetrics

log = logging.getLogger(__name__)
BACKOFF_S = (0, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1597)
RESTARTING, FAILED = "RESTARTING", "FAILED"
START_CONCURRENCY = 4  # workers of one pool forked and loading at the same time


@dataclass(frozen=True)
class PoolSettings:
    response_timeout: float
    max_retry_timeout: float = 300
    stop_timeout: float = 120  # how long a stopping worker may take to finish its batch and exit
    gpu_ids: tuple[int, ...] = ()  # round-robin over these; () runs on the CPU
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT  # jobs sent and unanswered per continuous worker (continuous.py)


class WorkerSlot:
    """One place for a worker: its current process, its state, its task, and its first load's outcome."""

    def __init__(self, worker_id: str, gpu: int | None) -> None:
        self.id, self.gpu = worker_id, gpu
        self.worker: WorkerProcess | None = None
        self.state = STARTING
        self.stopping = False
        self.busy = False
        self.last_error: str | None = None
        self.load_failed = False  # its last attempt to load the model failed (it has not been READY since)
        self.warned_memory = False  # the log said once that its process loaded over the memory limit
        self.queue: JobQueue | None = None  # its own queue, with its batcher, when sequences are pinned to it
        self.batcher: Batcher | None = None
        self.generation = 0  # how many processes it started: a sequence's state lives in one of them
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[Any] | None = None

    def wake(self) -> None:
        """Interrupt the slot's wait (for a job, or a back-off): its process exited, or it should stop."""
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def wait(self, fut: asyncio.Future[Any], timeout: float | None = None) -> None:
        """Wait for `fut`, for `timeout` s, or until woken; `fut` is cancelled if still pending."""
        self._wake = fut
        try:
            await asyncio.wait((fut,), timeout=timeout)
        finally:
            self._wake = None
            fut.cancel()

    def first_load(self, error: BaseException | None) -> None:
        if not self.ready.done():
            if error is None:
                self.ready.set_result(None)
            else:
                self.ready.set_exception(error)
                self.ready.exception()  # retrieved: nobody may be waiting (a restart long after registration)


class WorkerPool:
    """The workers of one model version, fed by its JobQueue."""

    def __init__(self, spec: WorkerSpec, queue: JobQueue, batcher: Batcher, metrics: ServerMetrics,
                 settings: PoolSettings, next_id: Callable[[], str],
                 memory_limit: MemoryLimit | None = None) -> None:  # fmt: skip
        self.spec, self.queue, self.batcher, self.metrics = spec, queue, batcher, metrics
        self.settings, self._next_id = settings, next_id
        self.memory_limit = memory_limit or MemoryLimit(0, lambda: 1)
        self.slots: list[WorkerSlot] = []
        self.min_workers = self.max_workers = 0
        self._batch_ids = itertools.count(1)
        self._gpus = itertools.cycle(settings.gpu_ids) if settings.gpu_ids else None
        self._starts = asyncio.Semaphore(START_CONCURRENCY)
        self._pinned = False

    def pin_sequences(self) -> None:
        """Give every worker its own job queue, fed by the sequences pinned to it (serve/management/sequences.py);
        the pool's queue then carries only what any worker may answer (customized describe)."""
        self._pinned = True

    def sequence_slots(self) -> list[WorkerSlot]:
        """The workers a sequence may be pinned to: running or (re)starting, not stopping, with their own queue."""
        return [s for s in self.slots if not s.stopping and s.state != FAILED and s.queue is not None]

    @property
    def live(self) -> int:
        return sum(1 for s in self.slots if s.state == READY)

    @property
    def continuous(self) -> bool:
        """Whether its workers run their handler in continuous mode (the ready handshake said so)."""
        return any(s.worker is not None and s.worker.continuous for s in self.slots)

    @property
    def active(self) -> int:
        """Workers running or (re)starting: those the worker caps count (serve/management/limits.py)."""
        return sum(1 for s in self.slots if not s.stopping and s.state != FAILED)

    def can_serve(self) -> bool:
        """True while some worker is ready or (re)starting: a job put now will be answered by a worker."""
        return any(not s.stopping and s.state != FAILED for s in self.slots)

    def healthy(self) -> bool:
        """False when the pool should have workers and every one of them gave up restarting."""
        return self.min_workers == 0 or self.can_serve()

    def loading_fails(self) -> bool:
        """True when no worker is READY and every worker's last attempt to load the model failed (a handler that
        crash-loops): a job queued now would only wait for a load that keeps failing, so it is answered 503 at
        once, with the load error."""
        active = [s for s in self.slots if not s.stopping and s.state != FAILED]
        return bool(active) and all(s.load_failed for s in active)

    def load_error(self) -> str | None:
        """Why the pool has no ready worker: the last error of a worker that is not READY (what describe shows as
        `lastError`), or None."""
        return next((s.last_error for s in self.slots if s.state != READY and s.last_error), None)

    def scale(self, min_workers: int, max_workers: int) -> list[asyncio.Future[None]]:
        """Start workers until `min_workers` run, stop them while more than `max_workers` do (failed workers are
        replaced); the first-load futures of the workers started."""
        self.min_workers, self.max_workers = min_workers, max_workers
        active = [s for s in self.slots if not s.stopping and s.state != FAILED]
        self.slots = [s for s in self.slots if s.state != FAILED]
        started = []
        while len(active) < min_workers:
            slot = self._add_slot()
            active.append(slot)
            started.append(slot.ready)
        # stop idle workers first, then the newest
        for slot in sorted(active, key=lambda s: (s.busy, -int(s.id)))[: max(len(active) - max_workers, 0)]:
            self._retire(slot)
        self._report()
        return started

    async def wait_ready(self, futures: list[asyncio.Future[None]], timeout: float | None) -> bool:
        """True once all these workers loaded, False if some are still loading after `timeout` s; the first load
        error is raised (ModelLoadError with the handler's message)."""
        if not futures:
            return True
        done, pending = await asyncio.wait(futures, timeout=timeout)
        for fut in done:
            if fut.exception() is not None:
                raise fut.exception()  # type: ignore[misc]
        return not pending

    async def stop(self, timeout: float) -> None:
        """Stop every worker (each finishes its batch), killing those still running after `timeout` s."""
        self.min_workers = self.max_workers = 0
        slots = list(self.slots)
        for slot in slots:
            self._retire(slot)
        tasks = [s.task for s in slots if s.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        for slot in slots:
            if slot.worker is not None:
                slot.worker.kill()
        if tasks:
            await asyncio.wait(tasks, timeout=10)

    def describe_workers(self) -> list[dict[str, Any]]:
        """TorchServe's worker objects: id, startTime, status, memoryUsage, pid, gpu, gpuUsage (+ lastError)."""
        out = []
        for slot in self.slots:
            w = slot.worker
            start = w.start_time if w is not None else time.time()
            entry: dict[str, Any] = {
                "id": slot.id,
                "startTime": _timestamp(start),
                "status": UNLOADING if slot.stopping and slot.state != STOPPED else slot.state,
                "memoryUsage": w.memory_usage() if w is not None and w.alive else 0,
                "pid": w.pid if w is not None and w.pid is not None else -1,
                "gpu": slot.gpu is not None,
                "gpuUsage": "N/A" if slot.gpu is None else f"gpuId::{slot.gpu}",
            }
            entry.update(_optimization(w))
            if slot.last_error:
                entry["lastError"] = slot.last_error
            out.append(entry)
        return out

    # ---- one slot ----------------------------------------------------------------------------------------------

    def _add_slot(self) -> WorkerSlot:
        slot = WorkerSlot(self._next_id(), next(self._gpus) if self._gpus else None)
        if self._pinned:  # at most one job per sequence is in it: never full
            slot.queue = JobQueue(1 << 30)
            slot.batcher = Batcher(slot.queue, self.batcher.batch_size, self.batcher.max_batch_delay_s * 1000)
        self.slots.append(slot)
        slot.task = asyncio.create_task(self._run(slot), name=f"worker {self.spec.model_name} {slot.id}")
        return slot

    def _retire(self, slot: WorkerSlot) -> None:
        slot.stopping = True
        slot.wake()
        if slot.state == STARTING and slot.worker is not None:
            slot.worker.kill()  # a loading worker has no batch to finish

    async def _run(self, slot: WorkerSlot) -> None:
        failures, failing_since = 0, 0.0
        try:
            while not slot.stopping:
                if failures:
                    slot.state = RESTARTING
                    backoff = BACKOFF_S[min(failures, len(BACKOFF_S)) - 1]
                    await slot.wait(asyncio.get_running_loop().create_future(), backoff)
                    if slot.stopping:
                        break
                error = await self._start(slot)
                if slot.stopping:
                    break
                if error is None:
                    failures = 0
                    recycled = await self._serve(slot)
                    if slot.stopping:
                        break
                    ended_by = slot.worker.ended_by if slot.worker is not None else None
                    self.metrics.worker_restart(self.spec.model_name, self.spec.version, ended_by or "died")
                    if recycled:
                        continue
                    error = slot.last_error or "the worker stopped"
                failures += 1
                failing_since = failing_since if failures > 1 else time.monotonic()
                if time.monotonic() - failing_since >= self.settings.max_retry_timeout:
                    self._give_up(slot, error)
                    return
        finally:
            await self._end(slot)

    async def _start(self, slot: WorkerSlot) -> str | None:
        """Start the slot's process once fewer than START_CONCURRENCY others are starting; None when it loaded,
        else the error text."""
        slot.state = STARTING
        async with self._starts:
            if slot.stopping:
                return "the worker was stopped before it started"
            return await self._start_now(slot)

    async def _start_now(self, slot: WorkerSlot) -> str | None:
        worker = slot.worker = WorkerProcess(slot.id, self.spec, slot.gpu)
        slot.generation += 1
        worker.on_exit(slot.wake)
        worker.on_exit(self._report)
        started = time.monotonic()
        try:
            await worker.start()
        except (ModelLoadError, WorkerError, OSError) as e:
            if slot.stopping:  # killed on purpose while loading (unregister, scale down): not a failure
                log.info("model %s version %s: worker %s stopped while loading", self.spec.model_name,
                         self.spec.version, slot.id)  # fmt: skip
            else:
                slot.last_error, slot.load_failed = str(e), True
                log.error("%s", e)
                if self.loading_fails():
                    self.queue.fail_all(self._no_worker_error)
            slot.first_load(e if isinstance(e, ModelLoadError) else ModelLoadError(str(e)))
            return str(e)
        slot.state, slot.load_failed = READY, False  # last_error stays: describe shows why it last restarted
        slot.warned_memory = False
        slot.first_load(None)
        name, version, reader = self.spec.model_name, self.spec.version, worker.memory_usage
        self.metrics.worker_load_time(f"W-{slot.id}-{name}_{version}", (time.monotonic() - started) * 1000)
        if worker.load_metrics:
            self.metrics.backend_metrics(name, version, worker.load_metrics)
        self.metrics.watch_worker_memory(name, version, slot.id, reader)
        worker.on_exit(lambda: self.metrics.forget_worker_memory(name, version, slot.id, reader))
        self._report()
        return None

    async def _serve(self, slot: WorkerSlot) -> bool:
        """The batch loop, until the slot stops or its process is lost (False) or was stopped for its memory (True)."""
        worker = slot.worker
        assert worker is not None
        if worker.continuous:
            return await self._serve_continuous(slot, worker)
        while not slot.stopping and worker.alive:
            await slot.wait(_either(self.queue, slot.queue))
            if slot.stopping or not worker.alive:
                break
            own = slot.queue is not None and slot.batcher is not None and len(slot.queue) > 0
            queue, batcher = (slot.queue, slot.batcher) if own else (self.queue, self.batcher)
            batch = await batcher.collect(1 if own else max(self.live, 1))  # type: ignore[union-attr]
            if not batch:
                continue
            if not worker.alive:
                queue.requeue(batch)  # type: ignore[union-attr]
                break
            if not await self._dispatch(slot, worker, batch):
                return False
            if self._over_memory(slot, worker):
                slot.state = RESTARTING
                worker.ended_by = "memory"
                await worker.stop(self.settings.stop_timeout)
                return True
        if not slot.stopping:
            slot.last_error = worker.death_message("while idle")
            log.error("model %s version %s: %s", self.spec.model_name, self.spec.version, slot.last_error)
        return False

    async def _serve_continuous(self, slot: WorkerSlot, worker: WorkerProcess) -> bool:
        """A continuous worker's loop (continuous.py) instead of batches; False when its process was lost."""
        name, version = self.spec.model_name, self.spec.version
        queue = slot.queue or self.queue
        dispatch = ContinuousDispatch(worker, queue, self.settings.max_in_flight, self.settings.response_timeout,
                                      self._sent, lambda records: self.metrics.backend_metrics(name, version, records),
                                      )  # fmt: skip
        slot.busy = True
        try:
            error = await dispatch.run(slot)
        finally:
            slot.busy = False
        if error is not None and not slot.stopping:
            slot.last_error = error
            log.error("model %s version %s: %s", self.spec.model_name, self.spec.version, error)
        return False

    def _sent(self, job: Any) -> None:
        name = self.spec.model_name
        self.metrics.queue_latency(name, job.request.requested_version, time.monotonic() - job.enqueue_time)
        self.metrics.queue_depth(name, self.spec.version, len(self.queue))

    def _over_memory(self, slot: WorkerSlot, worker: WorkerProcess) -> bool:
        """True when the worker holds more than its memory limit and a new worker would not (memory.py)."""
        limit = self.memory_limit.bytes()
        rss = worker.memory_usage() if limit is not None else 0
        if limit is None or rss <= limit:
            return False
        where = f"model {self.spec.model_name} version {self.spec.version}: worker {worker.id} (pid {worker.pid})"
        if worker.loaded_memory > limit:
            if not slot.warned_memory:
                slot.warned_memory = True
                log.warning("%s held %s once its model loaded, over its memory limit of %s (%s); it is not "
                            "restarted for memory, as a new worker would hold as much", where,
                            mib(worker.loaded_memory), mib(limit), self.memory_limit.source())  # fmt: skip
            return False
        slot.last_error = (f"{where} held {mib(rss)} after a batch, over its memory limit of {mib(limit)} ("
                           f"{self.memory_limit.source()}); it answered its requests and was restarted")  # fmt: skip
        log.warning("%s", slot.last_error)
        return True

    async def _dispatch(self, slot: WorkerSlot, worker: WorkerProcess, batch: list[Any]) -> bool:
        """Run one batch; False when the worker was lost doing it (its jobs are answered with the error)."""
        name, version = self.spec.model_name, self.spec.version
        now = time.monotonic()
        for job in batch:  # labelled with the version the client named, "default" for none, as TorchServe does
            self.metrics.queue_latency(name, job.request.requested_version, now - job.enqueue_time)
        self.metrics.batch(name, version, len(batch))
        self.metrics.queue_depth(name, version, len(self.queue))
        slot.busy = True
        try:
            reply = await run_batch(worker, batch, next(self._batch_ids), self.settings.response_timeout)
        finally:
            slot.busy = False
        self.metrics.statistics.batch(name, version, batch_times(batch, reply, now, time.monotonic()))
        if isinstance(reply, str):  # killed on a timeout, or died
            slot.last_error = reply
            (log.warning if slot.stopping else log.error)("model %s version %s: %s", name, version, reply)
            await worker.wait_exit(10.0)
            return False
        handler_ms = float(reply.get("handler_ms", 0.0))
        self.metrics.handler_time(name, version, handler_ms)
        self.metrics.worker_thread_time(max(0.0, (time.monotonic() - now) * 1000 - handler_ms))
        if reply.get("metrics"):
            self.metrics.backend_metrics(name, version, reply["metrics"])
        return True

    def _give_up(self, slot: WorkerSlot, error: str) -> None:
        slot.state = FAILED
        log.error("model %s version %s: worker %s gave up restarting after %g s of failures: %s",
                  self.spec.model_name, self.spec.version, slot.id, self.settings.max_retry_timeout, error)  # fmt: skip

    async def _end(self, slot: WorkerSlot) -> None:
        if slot.worker is not None and slot.worker.returncode is None:
            await slot.worker.stop(self.settings.stop_timeout)
        slot.first_load(WorkerError(f"worker {slot.id} was stopped before its model loaded"))
        if slot.queue is not None:  # its sequences' requests: their state was in this worker
            lost = f"Model {self.spec.model_name}: worker {slot.id}, which held this request's sequence, stopped"
            slot.queue.fail_all(lambda: ModelNotReady(f"{lost}: start a new sequence"))
        if slot.state != FAILED:
            slot.state = STOPPED
            if slot in self.slots:
                self.slots.remove(slot)
        if not self.can_serve():
            self.queue.fail_all(self._no_worker_error)
        self._report()

    def _no_worker_error(self) -> ModelNotReady:
        return no_worker_error(f'"{self.spec.model_name}" Version {self.spec.version}', self.load_error())

    def _report(self) -> None:
        self.metrics.workers(self.spec.model_name, self.spec.version, self.live, len(self.slots))


def _either(queue: JobQueue, other: JobQueue | None) -> asyncio.Future[None]:
    """A future done when `queue` or `other` has a job; cancelling it cancels the waits on both."""
    if other is None:
        return queue.waiter()
    waits = [queue.waiter(), other.waiter()]
    either: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done(_: Any) -> None:
        if not either.done():
            either.set_result(None)

    for wait in waits:
        wait.add_done_callback(done)
    either.add_done_callback(lambda _: [w.cancel() for w in waits])
    return either


def no_worker_error(where: str, load_error: str | None) -> ModelNotReady:
    """503 for a model with no worker to serve: with the load error describe shows when its workers failed, else
    TorchServe's advice to scale workers."""
    if load_error:
        return ModelNotReady(f"Model {where} has no worker to serve inference request: {load_error}")
    return ModelNotReady(f"Model {where} has no worker to serve inference request. Please use scale workers API to "
                         "add workers.")  # fmt: skip


def _optimization(worker: WorkerProcess | None) -> dict[str, Any]:
    """Ours: whether the worker's model runs optimized, why not, and the batch sizes warmed before it was ready."""
    report = getattr(worker, "optimization", None) or {}  # set by the ready handshake of this process
    if not report:
        return {"optimized": False, "optimizeReason": "the worker has not loaded the model", "warmedBatchSizes": []}
    warmed = report.get("warmed")
    return {"optimized": bool(report.get("optimized")), "optimizeReason": report.get("reason"),
            "warmedBatchSizes": warmed if isinstance(warmed, list) else []}  # fmt: skip


def _timestamp(epoch: float) -> str:
    """TorchServe's startTime format, yyyy-MM-dd'T'HH:mm:ss.SSS'Z', in UTC (TorchServe prints local time)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch * 1000) % 1000:03d}Z"
