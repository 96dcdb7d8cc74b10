"""`BatchLoop`: what a READY worker does until it is lost, stopped, or recycled for its memory.

    loop = BatchLoop(spec, queue, batcher, metrics, settings, memory_limit, live=lambda: pool.live)
    recycled = await loop.serve(slot)      # False: the process was lost (slot.last_error says why); True: memory

The loop waits for a job (in the pool's queue, or in the slot's own queue when sequences are pinned to it, which
goes first), takes a batch with the Batcher, runs it (dispatch.py) and records its metrics; a continuous worker
runs continuous.py's dispatch instead of batches. A worker's service ends in one of two ways, each counted by the
pool in `ts_worker_restarts_total` under the reason the worker's handle recorded:
- lost (unresponsive, response_timeout, died): the batch's reply is the error text. A READY worker that sends no
  heartbeat for `worker_heartbeat_interval` x `worker_heartbeat_misses` s (SIGSTOP, a deadlock, native code holding
  the GIL) is killed by its handle (worker_process.py) and its batch fails with "Worker died. ... sent no heartbeat
  ..." (500); a long batch keeps beating, `response_timeout` ends it. The error becomes the slot's `lastError` and
  the pool starts a new worker as after a failure, with back-off.
- memory: after each batch it answered, a worker whose RSS is over its limit (memory.py) is stopped (it holds no
  job then: no request is lost, queued ones wait for the new worker) and started again at once, with a warning
  saying how much it held. Not a failure: no back-off. A worker that loaded its model over the limit is never
  recycled for it (a new one would hold as much): the log says so once per process.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from serve.batching import Batcher, JobQueue
from serve.management.batch_statistics import batch_times
from serve.management.continuous import ContinuousDispatch
from serve.management.dispatch import run_batch
from serve.management.memory import MemoryLimit, mib
from serve.management.worker_process import WorkerProcess, WorkerSpec
from serve.management.worker_slot import RESTARTING, PoolSettings, WorkerSlot
from serve.metrics import ServerMetrics

log = logging.getLogger(__name__)


class BatchLoop:
    """The batch loop of one model version's workers, fed by its JobQueue (and each slot's own queue)."""

    def __init__(self, spec: WorkerSpec, queue: JobQueue, batcher: Batcher, metrics: ServerMetrics,
                 settings: PoolSettings, memory_limit: MemoryLimit, live: Callable[[], int]) -> None:  # fmt: skip
        self.spec, self.queue, self.batcher, self.metrics = spec, queue, batcher, metrics
        self.settings, self.memory_limit, self._live = settings, memory_limit, live
        self._batch_ids = itertools.count(1)

    async def serve(self, slot: WorkerSlot) -> bool:
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
            batch = await batcher.collect(1 if own else max(self._live(), 1))  # type: ignore[union-attr]
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
