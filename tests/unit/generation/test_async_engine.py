"""AsyncLLMEngine: the same tokens as the reference from a background thread, closing the iterator or cancelling
the task aborts the request and frees its blocks, a failing step fails only its requests, deadlines abort."""

from __future__ import annotations

import asyncio
import time

import pytest

from serve.generation import AsyncLLMEngine, SamplingParams
from tests.unit.generation.tiny import TinyDecoder, make_engine, prompt, tokens_of

GREEDY = dict(temperature=0.0)


def _idle(aengine: AsyncLLMEngine, timeout: float = 30.0) -> bool:
    """Wait (bounded) until the engine has nothing in flight and its thread has ended."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not aengine.engine.has_unfinished() and aengine._thread is None:
            return True
        time.sleep(0.01)
    return False


async def _collect(aengine: AsyncLLMEngine, rid: str, ids: list[int], params: SamplingParams, **kw) -> list:
    return [out async for out in aengine.generate(rid, ids, params, **kw)]


def test_concurrent_generates_give_the_reference_tokens() -> None:
    aengine = AsyncLLMEngine(make_engine(max_num_seqs=3))
    requests = [(f"r{i}", prompt(700 + i, 4 + 3 * i), 4 + i) for i in range(6)]

    async def main() -> list[list]:
        return await asyncio.gather(*(_collect(aengine, r, ids, SamplingParams(max_tokens=n, **GREEDY))
                                      for r, ids, n in requests))  # fmt: skip

    results = asyncio.run(main())
    reference = TinyDecoder()
    for (_, ids, n), outs in zip(requests, results):
        assert tokens_of(outs) == reference.reference_greedy(ids, n) and outs[-1].finished
    assert _idle(aengine)


def test_closing_the_iterator_or_cancelling_the_task_aborts_and_frees_the_blocks() -> None:
    engine = make_engine()
    aengine = AsyncLLMEngine(engine)
    long = SamplingParams(max_tokens=200, ignore_eos=True, **GREEDY)

    async def main() -> None:
        stream = aengine.generate("closed", prompt(1, 20), long)
        got = [await stream.__anext__() for _ in range(2)]
        assert all(not o.finished for o in got)
        await stream.aclose()

        async def consume() -> None:
            async for _ in aengine.generate("cancelled", prompt(2, 20), long):
                pass

        task = asyncio.create_task(consume())
        for _ in range(1000):  # bounded: until it holds blocks
            if engine.blocks.num_free_blocks < engine.blocks.num_blocks:
                break
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert _idle(aengine)
    assert engine.blocks.num_free_blocks == engine.blocks.num_blocks
    assert engine.stats()["generation_tokens"] < 2 * 200  # neither ran to its max_tokens


def test_a_failing_step_fails_its_requests_and_later_ones_are_served() -> None:
    engine = make_engine()
    aengine = AsyncLLMEngine(engine)
    engine.decoder.fail_next = True  # type: ignore[attr-defined]

    async def main() -> list:
        with pytest.raises(RuntimeError, match="on purpose"):
            await _collect(aengine, "bad", prompt(1, 5), SamplingParams(max_tokens=3, **GREEDY))
        return await _collect(aengine, "good", prompt(2, 5), SamplingParams(max_tokens=3, **GREEDY))

    outs = asyncio.run(main())
    assert tokens_of(outs) == TinyDecoder().reference_greedy(prompt(2, 5), 3)
    assert _idle(aengine)


def test_a_deadline_finishes_with_abort_and_a_bad_request_raises_at_once() -> None:
    engine = make_engine()
    aengine = AsyncLLMEngine(engine)
    long = SamplingParams(max_tokens=200, ignore_eos=True, **GREEDY)

    async def main() -> list:
        with pytest.raises(ValueError, match="max_model_len"):
            await _collect(aengine, "huge", [1] * 10, SamplingParams(max_tokens=10_000))
        return await _collect(aengine, "late", prompt(3, 5), long, deadline=time.monotonic() - 1)

    outs = asyncio.run(main())
    assert outs[-1].finished and outs[-1].finish_reason == "abort"
    assert _idle(aengine) and engine.blocks.num_free_blocks == engine.blocks.num_blocks


def test_callbacks_receive_every_output_from_the_engine_thread() -> None:
    aengine = AsyncLLMEngine(make_engine())
    received: list = []
    aengine.add_request("cb", prompt(4, 6), SamplingParams(max_tokens=5, n=2, **GREEDY), callback=received.append)
    assert _idle(aengine)
    expected = TinyDecoder().reference_greedy(prompt(4, 6), 5)
    for index in (0, 1):
        assert tokens_of([o for o in received if o.index == index]) == expected
    assert sum(o.finished for o in received) == 2


def test_a_callback_that_raises_aborts_its_request_only() -> None:
    engine = make_engine()
    aengine = AsyncLLMEngine(engine)
    received: list = []

    def gone(_item: object) -> None:
        raise RuntimeError("event loop is closed")

    long = SamplingParams(max_tokens=200, ignore_eos=True, **GREEDY)
    aengine.add_request("gone", prompt(5, 6), long, callback=gone)
    aengine.add_request("here", prompt(6, 6), SamplingParams(max_tokens=30, **GREEDY), callback=received.append)
    assert _idle(aengine)
    assert tokens_of(received) == TinyDecoder().reference_greedy(prompt(6, 6), 30)
    assert engine.stats()["generation_tokens"] < 200 and engine.blocks.num_free_blocks == engine.blocks.num_blocks
