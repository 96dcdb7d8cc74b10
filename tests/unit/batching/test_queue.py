"""JobQueue: bounded FIFO (QueueFull at once), waiters, requeue, dropped jobs, draining, recent concurrency."""

from __future__ import annotations

import asyncio
import types

import pytest

from serve.batching import DESCRIBE, InferenceRequest, Job, JobQueue
from serve.batching import queue as queue_module
from serve.errors import QueueFull


def job(n: int = 0, kind: str = "predict") -> Job:
    return Job.create(InferenceRequest(f"r{n}", {"body": b"x"}), kind)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 5))


def test_fifo_and_queue_full_at_once():
    async def scenario():
        q = JobQueue(2, full_message="full!")
        a, b = job(1), job(2)
        q.put(a)
        q.put(b)
        with pytest.raises(QueueFull, match="full!"):
            q.put(job(3))
        assert (len(q), q.remaining_capacity, q.outstanding) == (2, 0, 2)
        assert q.pop() is a and q.pop() is b and q.pop() is None
        assert q.remaining_capacity == 2 and q.outstanding == 2  # taken, not yet answered

    run(scenario())


def test_jobs_whose_caller_left_are_skipped_and_requeue_puts_back_in_front():
    async def scenario():
        q = JobQueue(10)
        gone, kept, later = job(1), job(2), job(3)
        for j in (gone, kept, later):
            q.put(j)
        gone.future.cancel()
        assert q.pop() is kept
        q.requeue([kept])
        assert q.pop() is kept and q.pop() is later

    run(scenario())


def test_describe_jobs_stop_a_predict_only_pop():
    async def scenario():
        q = JobQueue(10)
        d = job(1, DESCRIBE)
        q.put(d)
        assert q.pop(predict_only=True) is None and q.pop() is d

    run(scenario())


def test_waiter_completes_on_put_and_at_once_when_jobs_wait():
    async def scenario():
        q = JobQueue(10)
        waiter = q.waiter()
        assert not waiter.done()
        q.put(job())
        await asyncio.sleep(0)
        assert waiter.done() and q.waiter().done()

    run(scenario())


def test_waits_given_up_are_not_kept():
    """A worker of a stateful model waits on its own queue and the model's and cancels one wait each time: a queue
    that never gets a job must not keep every wait given up on it (a leak of one future per batch)."""

    async def scenario():
        q = JobQueue(10)
        for _ in range(1000):
            q.waiter().cancel()
        live = q.waiter()
        assert len(q._waiters) == 1
        q.put(job())
        await asyncio.sleep(0)
        assert live.done()

    run(scenario())


def test_drained_waits_for_answers_and_fail_all_answers_the_queued():
    async def scenario():
        q = JobQueue(10)
        running, queued = job(1), job(2)
        q.put(running)
        q.put(queued)
        q.pop()
        drained = asyncio.create_task(q.drained())
        assert q.fail_all(lambda: RuntimeError("gone")) == 1
        with pytest.raises(RuntimeError, match="gone"):
            await queued.future
        await asyncio.sleep(0.01)
        assert not drained.done()
        running.succeed(None)
        await asyncio.wait_for(drained, 1)

    run(scenario())


def test_recent_concurrency_is_the_peak_of_the_last_windows(monkeypatch):
    clock = [100.0]  # the queue's own clock, moved by hand: a loaded machine cannot skip a window
    monkeypatch.setattr(queue_module, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))

    async def scenario():
        q = JobQueue(10, window_s=1.0)
        jobs = [job(i) for i in range(3)]
        for j in jobs:
            q.put(j)
        for j in jobs:
            j.succeed(None)
        await asyncio.sleep(0)
        assert q.outstanding == 0 and q.recent_concurrency() == 3
        clock[0] += 1.5  # in the next window the peak is still remembered
        assert q.recent_concurrency() == 3
        clock[0] += 1.0  # a window later it is forgotten
        assert q.recent_concurrency() == 0

    run(scenario())
