"""SequenceRouter (serve/management/sequences.py) against fake worker slots: pinning, one request of a sequence at a
time in order, the cap and backlog 503s, closed and expired ids, Triton's start rule, and the model-config keys."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import pytest

from serve.batching import InferenceRequest, Job, JobQueue
from serve.batching.envelopes import PROTOCOL_HEADER
from serve.errors import InvalidInput, ModelNotReady, QueueFull
from serve.management.config_keys import unsupported_keys
from serve.management.sequences import (
    SEQUENCE_END,
    SEQUENCE_ID,
    SEQUENCE_START,
    SequenceRouter,
    SequenceSettings,
    sequence_settings,
)


@dataclass
class FakeSlot:
    id: str
    queue: JobQueue | None = field(default_factory=lambda: JobQueue(100))
    generation: int = 1


def job(**headers: str) -> Job:
    return Job.create(InferenceRequest("r", {"body": b"1"}, headers=dict(headers)))


def router(slots: list[FakeSlot], **settings: int) -> SequenceRouter:
    return SequenceRouter("m", "1.0", SequenceSettings(**settings), lambda: slots)


def answer(queue: JobQueue) -> Job:
    taken = queue.pop()
    assert taken is not None
    taken.succeed(object())  # type: ignore[arg-type]
    return taken


def test_sequences_are_pinned_to_the_least_loaded_worker_and_run_one_request_at_a_time():
    async def scenario():
        a, b = FakeSlot("a"), FakeSlot("b")
        r = router([a, b], max_num_sequence=4, max_job_queue=5)
        first, second, third = job(**{SEQUENCE_ID: "s"}), job(**{SEQUENCE_ID: "s"}), job(**{SEQUENCE_ID: "t"})
        assert r.submit(first) == "s"
        r.submit(second)
        r.submit(third)
        assert len(a.queue) == 1 and len(b.queue) == 1  # s on a (second waits behind first), t on b
        assert first.request.headers[SEQUENCE_START] == "true" and SEQUENCE_START not in second.request.headers
        assert answer(a.queue) is first
        await asyncio.sleep(0)  # the done callback hands the next request of s to a
        assert a.queue.pop() is second

    asyncio.run(scenario())


def test_a_request_without_an_id_opens_a_new_sequence():
    async def scenario():
        r = router([FakeSlot("a")], max_num_sequence=2)
        j = job()
        sequence_id = r.submit(j)
        assert sequence_id.startswith("ts-seq-") and j.request.headers[SEQUENCE_ID] == sequence_id
        assert j.request.headers[SEQUENCE_START] == "true"

    asyncio.run(scenario())


def test_the_cap_and_the_backlog_are_503s():
    async def scenario():
        r = router([FakeSlot("a")], max_num_sequence=1, max_job_queue=1)
        r.submit(job(**{SEQUENCE_ID: "s"}))
        with pytest.raises(ModelNotReady, match="maxNumSequence=1"):
            r.submit(job(**{SEQUENCE_ID: "t"}))
        r.submit(job(**{SEQUENCE_ID: "s"}))
        with pytest.raises(QueueFull, match="maxSequenceJobQueueSize=1"):
            r.submit(job(**{SEQUENCE_ID: "s"}))

    asyncio.run(scenario())


def test_an_ended_sequence_is_closed_and_its_id_refused_without_a_start():
    async def scenario():
        slot = FakeSlot("a")
        r = router([slot], max_num_sequence=1)
        r.submit(job(**{SEQUENCE_ID: "s", SEQUENCE_END: "true"}))
        answer(slot.queue)
        await asyncio.sleep(0)
        assert r.open == {}
        with pytest.raises(InvalidInput, match="Sequence s of model m was ended"):
            r.submit(job(**{SEQUENCE_ID: "s"}))
        r.submit(job(**{SEQUENCE_ID: "s", SEQUENCE_START: "true"}))  # restarted
        assert list(r.open) == ["s"]

    asyncio.run(scenario())


def test_idle_sequences_expire():
    async def scenario():
        slot = FakeSlot("a")
        r = router([slot], max_num_sequence=1, max_idle_ms=1000)
        r.submit(job(**{SEQUENCE_ID: "s"}))
        assert r.expire_idle() == []  # its request is running
        answer(slot.queue)
        await asyncio.sleep(0)
        last = r.open["s"].last
        assert r.expire_idle(last + 0.5) == []
        assert r.expire_idle(last + 1.5) == ["s"]
        with pytest.raises(InvalidInput, match="expired"):
            r.submit(job(**{SEQUENCE_ID: "s"}))

    asyncio.run(scenario())


def test_triton_needs_a_start_for_a_new_id_and_an_id():
    async def scenario():
        r = router([FakeSlot("a")], max_num_sequence=2)
        with pytest.raises(InvalidInput, match="is not open"):
            r.submit(job(**{SEQUENCE_ID: "7", PROTOCOL_HEADER: "v2"}))
        with pytest.raises(InvalidInput, match="set the request parameter sequence_id"):
            r.submit(job(**{PROTOCOL_HEADER: "v2"}))
        r.submit(job(**{SEQUENCE_ID: "7", SEQUENCE_START: "true", PROTOCOL_HEADER: "v2"}))

    asyncio.run(scenario())


def test_requests_of_a_stopped_worker_fail_and_close_the_sequence():
    async def scenario():
        slots = [FakeSlot("a")]
        r = router(slots, max_num_sequence=1, max_job_queue=2)
        r.submit(job(**{SEQUENCE_ID: "s"}))
        waiting = job(**{SEQUENCE_ID: "s"})
        r.submit(waiting)
        running = slots[0].queue.pop()
        slots.clear()  # the worker was scaled away
        running.succeed(object())  # type: ignore[arg-type]
        await asyncio.sleep(0)
        with pytest.raises(ModelNotReady, match="stopped: its state is lost; start a new sequence"):
            waiting.future.result()
        assert r.open == {}

    asyncio.run(scenario())


def test_model_config_keys():
    assert sequence_settings({}, "w") is None
    assert sequence_settings({"sequenceBatching": True, "maxNumSequence": 4, "sequenceMaxIdleMSec": 10,
                              "maxSequenceJobQueueSize": 3}, "w") == SequenceSettings(4, 3, 10)  # fmt: skip
    assert sequence_settings({"sequenceBatching": "true"}, "w") == SequenceSettings(1, 1, 60_000)
    with pytest.raises(InvalidInput, match="maxNumSequence=0 is not valid"):
        sequence_settings({"sequenceBatching": True, "maxNumSequence": 0}, "w")
    with pytest.raises(InvalidInput, match="continuousBatching together"):
        sequence_settings({"sequenceBatching": True, "continuousBatching": True}, "w")
    honoured = {"sequenceBatching": True, "maxNumSequence": 4, "sequenceTimeoutMSec": 5}
    assert unsupported_keys(honoured, "w") == ()
    assert sequence_settings(honoured, "w") == SequenceSettings(4, 1, 60_000, 5)
    assert unsupported_keys({"maxNumSequence": 4}, "w") == ("maxNumSequence",)


def test_a_sequence_whose_worker_restarted_is_closed_with_a_503():
    async def scenario():
        slot = FakeSlot("a")
        r = router([slot], max_num_sequence=2, max_job_queue=2)
        r.submit(job(**{SEQUENCE_ID: "s"}))
        answer(slot.queue)
        await asyncio.sleep(0)
        assert r.open["s"].generation == 1  # the process that answered its first request
        slot.generation = 2  # that process died and the slot started another: a restart of s is fine
        r.submit(job(**{SEQUENCE_ID: "s", SEQUENCE_START: "true"}))
        answer(slot.queue)
        await asyncio.sleep(0)
        assert r.open["s"].generation == 2
        slot.generation = 3
        after = job(**{SEQUENCE_ID: "s"})
        r.submit(after)
        with pytest.raises(ModelNotReady, match="was restarted"):
            after.future.result()
        assert r.open == {}
        with pytest.raises(InvalidInput, match="was lost"):
            r.submit(job(**{SEQUENCE_ID: "s"}))
        r.submit(job(**{SEQUENCE_ID: "s", SEQUENCE_START: "true"}))  # a new sequence lives in the new process

    asyncio.run(scenario())


def test_a_sequence_older_than_sequence_timeout_is_closed():
    async def scenario():
        slot = FakeSlot("a")
        r = router([slot], max_num_sequence=2, max_idle_ms=600_000, timeout_ms=1000)
        r.submit(job(**{SEQUENCE_ID: "s"}))
        answer(slot.queue)
        await asyncio.sleep(0)
        opened = r.open["s"].opened
        assert r.expire_idle(opened + 0.5) == []
        assert r.expire_idle(opened + 1.5) == ["s"]
        with pytest.raises(InvalidInput, match="timed out"):
            r.submit(job(**{SEQUENCE_ID: "s"}))
        r.submit(job(**{SEQUENCE_ID: "t"}))
        r.open["t"].opened -= 2  # older than the timeout while a request is asked for
        with pytest.raises(InvalidInput, match=r"timed out \(sequenceTimeoutMSec=1000\)"):
            r.submit(job(**{SEQUENCE_ID: "t"}))
        r.submit(job(**{SEQUENCE_ID: "v"}))
        r.open["v"].opened -= 2
        r.submit(job(**{SEQUENCE_ID: "v", SEQUENCE_START: "true"}))  # a restart starts its time again
        assert not r._timed_out(r.open["v"], time.monotonic())

    asyncio.run(scenario())
