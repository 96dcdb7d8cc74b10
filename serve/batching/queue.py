"""`JobQueue`: one model version's bounded FIFO of jobs, shared by all its worker loops.

`put` never waits: a full queue raises QueueFull at once (TorchServe answers 503 the same way). Consumers wait with
`waiter()` (a future resolved when a job is available; resolving it from elsewhere wakes the consumer early, which
is how a worker loop also notices its process died or that it should stop). Jobs whose caller went away (their
future is done) are skipped by `pop`, never sent to a worker.

The queue also counts *outstanding* jobs (put and not yet answered, whether queued or running on a worker) and
remembers the peak over the last two windows of `window_s` seconds: `recent_concurrency()`, the batcher's guess of
how many requests will arrive together.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from serve.batching.job import PREDICT, Job
from serve.errors import QueueFull


class JobQueue:
    """Bounded FIFO of jobs; `capacity` is the model's job_queue_size."""

    def __init__(self, capacity: int, full_message: str = "", window_s: float = 1.0) -> None:
        if capacity < 1:
            raise ValueError(f"job queue capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.full_message = full_message or f"the job queue is full ({capacity} requests waiting); retry later"
        self._jobs: deque[Job] = deque()
        self._waiters: list[asyncio.Future[None]] = []
        self._outstanding = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._window_s = window_s
        self._window_start = time.monotonic()
        self._peaks = [0, 0]  # previous window, current window

    def __len__(self) -> int:
        return len(self._jobs)

    @property
    def remaining_capacity(self) -> int:
        return max(self.capacity - len(self._jobs), 0)

    @property
    def outstanding(self) -> int:
        """Jobs put and not yet answered (queued or running)."""
        return self._outstanding

    def put(self, job: Job) -> None:
        """Enqueue `job`, or raise QueueFull when `capacity` jobs are already waiting."""
        if len(self._jobs) >= self.capacity:
            raise QueueFull(self.full_message)
        self._jobs.append(job)
        self._outstanding += 1
        self._idle.clear()
        self._note_peak()
        job.future.add_done_callback(self._job_done)
        self._wake()

    def requeue(self, jobs: Iterable[Job]) -> None:
        """Put jobs taken but never sent back at the front, in their order (capacity is not checked)."""
        for job in reversed(list(jobs)):
            if not job.done:
                self._jobs.appendleft(job)
        if self._jobs:
            self._wake()

    def pop(self, predict_only: bool = False) -> Job | None:
        """The next job whose caller still waits; None when there is none (or, with `predict_only`, when the next
        one is a describe job, which travels alone)."""
        while self._jobs:
            job = self._jobs[0]
            if job.done:
                self._jobs.popleft()
                continue
            if predict_only and job.kind != PREDICT:
                return None
            return self._jobs.popleft()
        return None

    def waiter(self) -> asyncio.Future[None]:
        """A future that completes when a job is available (at once if one is)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._jobs:
            fut.set_result(None)
        else:
            # drop the waits given up (a worker of a stateful model waits on two queues and cancels one each time)
            self._waiters = [w for w in self._waiters if not w.done()]
            self._waiters.append(fut)
        return fut

    def fail_all(self, make_error: Callable[[], BaseException]) -> int:
        """Fail every queued job with its own `make_error()`; returns how many there were."""
        count = 0
        while (job := self.pop()) is not None:
            job.fail(make_error())
            count += 1
        return count

    async def drained(self) -> None:
        """Return once no job is queued or running."""
        await self._idle.wait()

    def recent_concurrency(self) -> int:
        """The most jobs outstanding at once during the current and the previous window."""
        self._rotate(time.monotonic())
        return max(self._peaks[0], self._peaks[1], self._outstanding)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def _job_done(self, _: asyncio.Future[Any]) -> None:
        self._outstanding -= 1
        if self._outstanding == 0:
            self._idle.set()

    def _note_peak(self) -> None:
        self._rotate(time.monotonic())
        self._peaks[1] = max(self._peaks[1], self._outstanding)

    def _rotate(self, now: float) -> None:
        elapsed = now - self._window_start
        if elapsed < self._window_s:
            return
        # one window passed: the current peak becomes the previous one; two or more: both are stale
        self._peaks = [self._peaks[1], 0] if elapsed < 2 * self._window_s else [0, 0]
        self._window_start = now
