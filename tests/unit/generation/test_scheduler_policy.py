"""The scheduler's admission of waiting prompts (serve/generation/scheduler.py): whole prompts after the first of a
step, the queue's head chunked when it alone exceeds the budget, and `prefill_step_cost` pacing a burst into groups
of about sqrt(cost * waiting tokens); the tokens stay the tiny decoder's cache-free greedy reference throughout."""

from __future__ import annotations

import numpy as np
import pytest

from serve.generation import EngineConfig, SamplingParams
from tests.unit.generation.tiny import make_engine, prompt, run, tokens_of

GREEDY = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)


def _first_step(engine, prompts: list[list[int]]) -> list[int]:
    """The new-token count of each sequence in the first step after all `prompts` arrive together."""
    for i, ids in enumerate(prompts):
        engine.add_request(f"r{i}", ids, GREEDY)
    engine.step()
    return [int(n) for n in np.diff(engine.decoder.batches[-1].query_starts)]


def test_after_the_first_prompt_only_whole_prompts_are_admitted() -> None:
    engine = make_engine(max_num_seqs=8, max_num_batched_tokens=64)
    # 30 + 30 fit; a chunk of 4 of the third would cost this step and give it no first token: it waits
    assert _first_step(engine, [prompt(i, 30) for i in range(3)]) == [30, 30]
    assert len(engine.scheduler.waiting) == 1


def test_the_head_of_the_queue_is_chunked_when_it_alone_exceeds_the_budget() -> None:
    engine = make_engine(max_num_seqs=8, max_num_batched_tokens=16)
    assert _first_step(engine, [prompt(1, 40), prompt(2, 3)]) == [16]  # vLLM's chunked prefill for the long one


def test_without_pacing_a_burst_starts_in_one_step() -> None:
    engine = make_engine(max_num_seqs=32, max_num_batched_tokens=512, num_blocks=512)
    assert _first_step(engine, [prompt(i, 32) for i in range(16)]) == [32] * 16  # vLLM's FCFS within the budget


def test_pacing_starts_a_burst_in_groups_that_do_not_shrink() -> None:
    engine = make_engine(max_num_seqs=32, max_num_batched_tokens=512, prefill_step_cost=32, num_blocks=512)
    assert _first_step(engine, [prompt(i, 32) for i in range(16)]) == [32] * 4  # isqrt(32 * 512) = 128 tokens
    engine.step()
    assert [int(n) for n in np.diff(engine.decoder.batches[-1].query_starts)] == [1] * 4 + [32] * 4  # decodes too
    for _ in range(2):
        engine.step()
    assert not engine.scheduler.waiting  # four steps of four prompts


def test_pacing_keeps_the_tokens_and_finishes_every_request() -> None:
    engine = make_engine(max_num_seqs=16, max_num_batched_tokens=64, prefill_step_cost=8, num_blocks=512)
    requests = [(f"r{i}", prompt(50 + i, 5 + 3 * i)) for i in range(10)]
    outputs = run(engine, {0: [(r, ids, GREEDY) for r, ids in requests]})
    for rid, ids in requests:
        assert tokens_of(outputs[rid]) == engine.decoder.reference_greedy(ids, 6, ignore_eos=True), rid
    assert engine.blocks.num_free_blocks == engine.blocks.num_blocks


def test_prefill_step_cost_must_be_positive() -> None:
    with pytest.raises(ValueError, match="prefill_step_cost must be >= 1"):
        EngineConfig(prefill_step_cost=0).validate()
