"""Batcher: full batches under load within max_batch_delay, no waiting for a lone request, describe alone.

Times are compared with the batcher's own delays, never with how fast this machine is: what must come at once is
checked against a delay of seconds (SLACK apart), and a wait that must last the delay only from below; a wait
that must end is bounded by the scenario's timeout.
"""

from __future__ import annotations

import asyncio
import time

from serve.batching import DESCRIBE, Batcher, InferenceRequest, Job, JobQueue


def job(n: int = 0, kind: str = "predict") -> Job:
    return Job.create(InferenceRequest(f"r{n}", {"body": b"x"}), kind)


SLACK = 5.0  # s: "at once" is well under a delay of 2 x SLACK, on a machine at a load of 10


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_queued_jobs_make_full_batches():
    async def scenario():
        q = JobQueue(100)
        jobs = [job(i) for i in range(10)]
        for j in jobs:
            q.put(j)
        b = Batcher(q, batch_size=4, max_batch_delay_ms=2_000 * SLACK)
        started = time.monotonic()
        sizes = [len(await b.next_batch()) for _ in range(2)]
        assert sizes == [4, 4] and time.monotonic() - started < SLACK  # full at once: no waiting
        started = time.monotonic()
        # ten clients are about: the last two wait out the delay (a short one, here) for more to join them
        short = Batcher(q, batch_size=4, max_batch_delay_ms=200)
        assert [j.request.request_id for j in await short.next_batch()] == ["r8", "r9"]
        assert time.monotonic() - started > 0.15

    run(scenario())


def test_a_lone_request_is_dispatched_at_once():
    async def scenario():
        q = JobQueue(100)
        b = Batcher(q, batch_size=8, max_batch_delay_ms=2_000 * SLACK)
        for i in range(3):  # a client at concurrency 1: each request answered before the next
            j = job(i)
            q.put(j)
            started = time.monotonic()
            assert await b.next_batch() == [j]
            assert time.monotonic() - started < SLACK
            j.succeed(None)
            await asyncio.sleep(0)

    run(scenario())


def test_under_concurrency_the_batch_waits_for_the_stragglers():
    async def scenario():
        q = JobQueue(100)
        b = Batcher(q, batch_size=4, max_batch_delay_ms=2_000 * SLACK)
        first = [job(i) for i in range(4)]
        for j in first:
            q.put(j)
        assert len(await b.next_batch()) == 4  # four clients: the recent concurrency is 4
        for j in first:
            j.succeed(None)
        q.put(job(10))

        async def stragglers():
            for i in range(3):
                await asyncio.sleep(0.02)
                q.put(job(11 + i))

        task = asyncio.create_task(stragglers())
        started = time.monotonic()
        batch = await b.next_batch()
        assert len(batch) == 4 and 0.05 < time.monotonic() - started < SLACK  # full: not the delay
        await task

    run(scenario())


def test_the_delay_bounds_the_wait():
    async def scenario():
        q = JobQueue(100)
        b = Batcher(q, batch_size=4, max_batch_delay_ms=100)
        peers = [job(i) for i in range(4)]
        for j in peers:
            q.put(j)  # raise the recent concurrency to 4
        await b.next_batch()
        lone = job(9)
        q.put(lone)
        started = time.monotonic()
        assert await b.next_batch() == [lone]
        assert time.monotonic() - started > 0.08  # waited the delay for peers, and no longer than run() allows

    run(scenario())


def test_describe_travels_alone_and_cancelled_collection_requeues():
    async def scenario():
        q = JobQueue(100)
        b = Batcher(q, batch_size=4, max_batch_delay_ms=5_000)
        a, d, c = job(1), job(2, DESCRIBE), job(3)
        for j in (a, d, c):
            q.put(j)
        assert await b.next_batch() == [a]  # stops before the describe job
        assert await b.next_batch() == [d]
        collecting = asyncio.create_task(b.next_batch())  # recent concurrency 3: waits for more
        await asyncio.sleep(0.05)
        collecting.cancel()
        await asyncio.gather(collecting, return_exceptions=True)
        assert q.pop() is c

    run(scenario())
