"""`WorkerPool`: the worker slots of one model version: scaling them, starting and restarting their processes.

    pool = WorkerPool(spec, queue, batcher, metrics, PoolSettings(...), next_id)
    ready = pool.scale(min_workers=2, max_workers=2)      # starts / stops workers; futures of the new ones
    await pool.wait_ready(ready, timeout)                 # ModelLoadError with the handler's error
    await pool.stop(timeout)

Each worker has a slot (worker_slot.py) with one task: start the process, then serve batches (batch_loop.py), and
when the process dies or is recycled (response timeout, memory) start it again. Restarts follow TorchServe's
back-off (0, 1, 1, 2, 3, 5, 8, ... s; reset after a successful load) for as long as the slot has been failing less
than `max_retry_timeout` s (model-config `maxRetryTimeoutInSec`, 300); then it stays FAILED, `healthy()` turns
False, and if no worker of the pool is left to serve, every queued job fails with 503 at once. While every worker's
last load failed (a handler that crash-loops), queued and new jobs are answered 503 at once with the load error too
(`loading_fails()`), instead of waiting for a load that keeps failing. Each replacement is counted in
`ts_worker_restarts_total` by reason (unresponsive, memory, response_timeout, died: batch_loop.py says when), and
each READY worker's RSS is on /metrics as `ts_worker_memory_bytes` (serve/metrics/worker_metrics.py).

Scaling, as in TorchServe, starts workers until there are `min_workers` and stops them while there are more than
`max_workers`; nothing autoscales in between. Scale-down stops idle workers first, then the newest, and lets a busy
worker finish its batch. How many workers may be asked for is capped before the pool is called
(serve/management/limits.py).

Bounded start rate: at most `START_CONCURRENCY` (4) workers of a pool are starting (forked and loading the model)
at any time; a slot beyond that waits, in state STARTING, until one of the starting workers is READY or has
failed, so even an allowed scale-up by dozens never forks dozens at once. Restarts take their turn the same way.
A slot scaled away while it waits is never started.

GPUs: each new worker takes the next of the version's `gpu_ids` (round-robin, as TorchServe), kept across its
restarts. What describe shows of each worker: worker_describe.py.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from serve.batching import Batcher, JobQueue
from serve.errors import ModelLoadError, ModelNotReady, WorkerError
from serve.management.batch_loop import BatchLoop
from serve.management.memory import MemoryLimit
from serve.management.worker_describe import describe_worker
from serve.management.worker_process import READY, STARTING, STOPPED, WorkerProcess, WorkerSpec
from serve.management.worker_slot import FAILED, RESTARTING, PoolSettings, WorkerSlot
from serve.metrics import ServerMetrics

log = logging.getLogger(__name__)
BACKOFF_S = (0, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1597)
START_CONCURRENCY = 4  # workers of one pool forked and loading at the same time


class WorkerPool:
    """The workers of one model version, fed by its JobQueue."""

    def __init__(self, spec: WorkerSpec, queue: JobQueue, batcher: Batcher, metrics: ServerMetrics,
                 settings: PoolSettings, next_id: Callable[[], str],
                 memory_limit: MemoryLimit | None = None) -> None:  # fmt: skip
        self.spec, self.queue, self.batcher, self.metrics = spec, queue, batcher, metrics
        self.settings, self._next_id = settings, next_id
        self.memory_limit = memory_limit or MemoryLimit(0, lambda: 1)
        self._loop = BatchLoop(spec, queue, batcher, metrics, settings, self.memory_limit, lambda: self.live)
        self.slots: list[WorkerSlot] = []
        self.min_workers = self.max_workers = 0
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
        """TorchServe's worker objects, one per slot (worker_describe.py)."""
        return [describe_worker(slot) for slot in self.slots]

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
                    recycled = await self._loop.serve(slot)
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


def no_worker_error(where: str, load_error: str | None) -> ModelNotReady:
    """503 for a model with no worker to serve: with the load error describe shows when its workers failed, else
    TorchServe's advice to scale workers."""
    if load_error:
        return ModelNotReady(f"Model {where} has no worker to serve inference request: {load_error}")
    return ModelNotReady(f"Model {where} has no worker to serve inference request. Please use scale workers API to "
                         "add workers.")  # fmt: skip
