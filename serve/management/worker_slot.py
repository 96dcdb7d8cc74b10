"""`WorkerSlot`: one place for a worker in a pool, kept across the processes that fill it; `PoolSettings`: what every
slot of a pool runs under.

A slot outlives its processes: a worker that dies or is recycled is replaced in the same slot, so the slot keeps
its id, its GPU, its own job queue (sequences pinned to it) and `generation` (how many processes it started: a
sequence's state lives in one of them). Its states, besides worker_process.py's READY, STARTING, STOPPED and
UNLOADING: RESTARTING (waiting out a back-off, or recycled for its memory) and FAILED (it gave up restarting).
`ready` resolves at the slot's first load only (what a synchronous registration or scale waits for); a later
restart's outcome shows in `state`, `last_error` and `load_failed`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from serve.batching import Batcher, JobQueue
from serve.management.continuous import DEFAULT_MAX_IN_FLIGHT
from serve.management.worker_process import STARTING, WorkerProcess

RESTARTING, FAILED = "RESTARTING", "FAILED"


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
