"""`Batcher`: takes one batch from a model's JobQueue, TorchServe's dynamic batching made adaptive.

TorchServe's worker loop takes the first job, then keeps polling until `batch_size` jobs or `max_batch_delay` ms
(from the first job) elapse, so a lone request at concurrency 1 always waits out the whole delay. Here the batch
is dispatched as soon as it holds `target` jobs, where

    target = min(batch_size, ceil(recent concurrency / live workers))

and recent concurrency is the most requests outstanding at once over the last one to two seconds (JobQueue). A lone
client (concurrency 1) is dispatched at once; under load the target reaches `batch_size` and batches fill, within
`max_batch_delay` as before. Whatever is already queued is always taken (up to `batch_size`), whatever the target.
A describe job travels alone. Jobs whose caller went away are dropped (JobQueue.pop).
"""

from __future__ import annotations

import asyncio
import math
import time

from serve.batching.job import PREDICT, Job
from serve.batching.queue import JobQueue


class Batcher:
    """Forms batches of up to `batch_size` jobs from `queue` within `max_batch_delay_ms` of the first one."""

    def __init__(self, queue: JobQueue, batch_size: int, max_batch_delay_ms: float) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.queue = queue
        self.batch_size = batch_size
        self.max_batch_delay_s = max(max_batch_delay_ms, 0) / 1000.0

    def target(self, workers: int = 1) -> int:
        """How many jobs a batch waits for: the recent concurrency shared among the live workers."""
        share = math.ceil(self.queue.recent_concurrency() / max(workers, 1))
        return max(1, min(self.batch_size, share))

    async def next_batch(self, workers: int = 1) -> list[Job]:
        """Wait for a job, then collect a batch (see `collect`)."""
        await self.queue.waiter()
        return await self.collect(workers)

    async def collect(self, workers: int = 1) -> list[Job]:
        """A batch starting with the queue's next job ([] when the queue holds none). If cancelled while it waits
        for more jobs, the jobs it took go back to the front of the queue."""
        first = self.queue.pop()
        if first is None:
            return []
        batch = [first]
        if first.kind != PREDICT:
            return batch
        target = self.target(workers)
        deadline = time.monotonic() + self.max_batch_delay_s
        try:
            await self._fill(batch, target, deadline)
        except asyncio.CancelledError:
            self.queue.requeue(batch)
            raise
        return batch

    async def _fill(self, batch: list[Job], target: int, deadline: float) -> None:
        while len(batch) < self.batch_size:
            job = self.queue.pop(predict_only=True)
            if job is not None:
                batch.append(job)
                continue
            remaining = deadline - time.monotonic()
            if len(batch) >= target or remaining <= 0 or self.queue:  # a describe job is next: stop here
                return
            waiter = self.queue.waiter()
            try:
                await asyncio.wait((waiter,), timeout=remaining)
            finally:
                waiter.cancel()
