"""LLMEngine against the tiny decoder's cache-free greedy reference: continuous batching, chunked prefill,
preemption, prefix caching, and the lifecycle (abort, deadline, a failing step, a failing request)."""

from __future__ import annotations

import numpy as np
import pytest

from serve.errors import QueueFull
from serve.generation import EngineConfig, LLMEngine, SamplingParams
from serve.generation import sampler as sampler_module
from serve.zoo.decoders.step import KVCache
from tests.unit.generation.tiny import EOS, TinyDecoder, ToyTokenizer, make_engine, prompt, run, tokens_of

GREEDY = dict(temperature=0.0)


def _requests(count: int, seed: int = 0) -> list[tuple[str, list[int], int]]:
    rng = np.random.default_rng(seed)
    return [(f"r{i}", prompt(100 + i, int(rng.integers(1, 40))), int(rng.integers(3, 20))) for i in range(count)]


def _check_against_reference(engine: LLMEngine, requests, outputs) -> None:
    decoder = engine.decoder
    for rid, ids, max_tokens in requests:
        expected = decoder.reference_greedy(ids, max_tokens)  # type: ignore[attr-defined]
        assert tokens_of(outputs[rid]) == expected, rid
        last = outputs[rid][-1]
        assert last.finished and last.finish_reason == ("stop" if expected[-1] == EOS else "length")
        assert last.completion_tokens == len(expected) and last.prompt_tokens == len(ids)
        assert sum(o.finished for o in outputs[rid]) == 1


def test_greedy_equals_the_reference_with_requests_joining_at_different_steps() -> None:
    engine = make_engine(max_num_seqs=4, max_num_batched_tokens=64)
    requests = _requests(12)
    arrivals: dict[int, list] = {}
    for i, (rid, ids, n) in enumerate(requests):
        arrivals.setdefault(3 * i, []).append((rid, ids, SamplingParams(max_tokens=n, **GREEDY)))
    outputs = run(engine, arrivals)
    _check_against_reference(engine, requests, outputs)
    batches = engine.decoder.batches  # type: ignore[attr-defined]
    assert max(b.num_sequences for b in batches) == 4  # max_num_seqs reached, never passed
    lengths = [np.diff(b.query_starts) for b in batches]
    assert any((q > 1).any() and (q == 1).any() for q in lengths)  # a prefill ran beside decodes
    assert engine.blocks.num_free_blocks == engine.blocks.num_blocks and engine.stats()["running"] == 0


def test_chunked_prefill_keeps_every_step_within_the_token_budget() -> None:
    engine = make_engine(max_num_seqs=8, max_num_batched_tokens=7)
    requests = [(f"r{i}", prompt(200 + i, 25 + i), 6) for i in range(5)]
    outputs = run(engine, {0: [(r, ids, SamplingParams(max_tokens=n, **GREEDY)) for r, ids, n in requests]})
    _check_against_reference(engine, requests, outputs)
    batches = engine.decoder.batches  # type: ignore[attr-defined]
    assert max(len(b.input_ids) for b in batches) == 7
    # a prompt of 25 tokens took several steps: some step ran a chunk that did not end its prompt
    assert any(len(b.logits_indices) < b.num_sequences for b in batches)


def test_preemption_when_blocks_run_out_completes_every_request_with_the_same_tokens() -> None:
    decoder = TinyDecoder()
    engine = make_engine(decoder, num_blocks=12, block_size=4, max_model_len=40, max_num_seqs=6,
                         max_num_batched_tokens=64)  # fmt: skip
    requests = [(f"r{i}", prompt(300 + i, 10 + i), 22) for i in range(6)]
    params = SamplingParams(max_tokens=22, ignore_eos=True, **GREEDY)
    outputs = run(engine, {0: [(r, ids, params) for r, ids, _ in requests]})
    assert engine.stats()["num_preemptions"] > 0
    for rid, ids, n in requests:
        assert tokens_of(outputs[rid]) == decoder.reference_greedy(ids, n, ignore_eos=True), rid
        assert outputs[rid][-1].finish_reason == "length"
    # the cache's memory is the budget: 12 blocks, allocated once
    per_block = KVCache.bytes_per_block(decoder.spec, 4)
    assert engine.cache.key[0].nbytes + engine.cache.value[0].nbytes == 12 * per_block
    assert engine.blocks.num_free_blocks == 12


def test_prefix_caching_reuses_the_blocks_of_a_shared_prompt_prefix() -> None:
    shared = prompt(7, 24)
    requests = [(f"r{i}", shared + prompt(400 + i, 3 + i), 5) for i in range(4)]
    requests.append(("again", requests[1][1], 5))  # 28 tokens, 7 full blocks: the last token is still run

    def serve(caching: bool) -> tuple[LLMEngine, dict]:
        engine = make_engine(enable_prefix_caching=caching, max_num_batched_tokens=64)
        arrivals = {
            10 * i: [(r, ids, SamplingParams(max_tokens=n, **GREEDY))] for i, (r, ids, n) in enumerate(requests)
        }
        return engine, run(engine, arrivals)

    cached, cached_out = serve(True)
    plain, plain_out = serve(False)
    _check_against_reference(cached, requests, cached_out)
    _check_against_reference(plain, requests, plain_out)
    stats = cached.stats()
    # the later four found the 6 full blocks of the shared prefix ("again" not its 7th: it holds the last token)
    assert stats["prefix_cache_hits"] == 4 * 24
    assert stats["prefix_cache_queries"] == sum(len(ids) for _, ids, _ in requests)
    assert plain.stats()["tokens_processed"] - stats["tokens_processed"] == 4 * 24
    assert [cached_out[r][-1].metrics.num_cached_tokens for r, _, _ in requests] == [0, 24, 24, 24, 24]
    m = cached_out["r0"][-1].metrics
    assert m.arrival <= m.first_scheduled <= m.first_token <= m.finished and m.num_preemptions == 0


def test_a_seed_gives_the_same_tokens_whatever_the_batch_mates_and_preemptions() -> None:
    params = SamplingParams(max_tokens=15, temperature=1.0, top_k=20, seed=1234, ignore_eos=True)
    alone = run(make_engine(), {0: [("s", prompt(1, 9), params)]})
    others = [(f"o{i}", prompt(500 + i, 12), SamplingParams(max_tokens=20, temperature=1.0, ignore_eos=True))
              for i in range(5)]  # fmt: skip
    crowded_engine = make_engine(num_blocks=10, max_model_len=40, max_num_batched_tokens=16)
    crowded = run(crowded_engine, {0: others[:3], 2: [("s", prompt(1, 9), params)], 4: others[3:]})
    assert crowded_engine.stats()["num_preemptions"] > 0
    assert tokens_of(alone["s"]) == tokens_of(crowded["s"])
    unseeded = run(make_engine(), {0: [("s", prompt(1, 9), SamplingParams(max_tokens=15, ignore_eos=True))]})
    assert tokens_of(unseeded["s"]) != tokens_of(alone["s"])  # 48^15 to one against


def test_n_sequences_of_one_request_have_their_indices() -> None:
    ids = prompt(3, 6)
    outputs = run(make_engine(), {0: [("r", ids, SamplingParams(max_tokens=4, n=3, **GREEDY))]})["r"]
    expected = TinyDecoder().reference_greedy(ids, 4)
    for index in range(3):
        mine = [o for o in outputs if o.index == index]
        assert tokens_of(mine) == expected and mine[-1].finished


def test_stop_strings_stop_token_ids_and_min_tokens() -> None:
    ids = prompt(11, 8)
    free = TinyDecoder().reference_greedy(ids, 12, ignore_eos=True)
    stop_token = free[3]
    stopped = run(make_engine(), {0: [("r", ids, SamplingParams(max_tokens=12, stop_token_ids=(stop_token,),
                                                                ignore_eos=True, **GREEDY))]})["r"]  # fmt: skip
    cut = free.index(stop_token)
    assert tokens_of(stopped) == free[: cut + 1] and stopped[-1].finish_reason == "stop"
    assert "".join(o.new_text for o in stopped) == ToyTokenizer().decode(free[:cut])  # the stop token has no text
    # a stop string spanning two tokens: the text ends before it, and it is never emitted
    stop = f"{ToyTokenizer().decode(free[4:6]).strip()}"
    text = run(make_engine(), {0: [("r", ids, SamplingParams(max_tokens=12, stop=stop, ignore_eos=True,
                                                             **GREEDY))]})["r"]  # fmt: skip
    full = ToyTokenizer().decode(free)
    joined = "".join(o.new_text for o in text)
    assert joined == full[: full.index(stop)] and text[-1].finish_reason == "stop"


def test_logprobs_are_the_log_softmax_of_the_processed_distribution() -> None:
    decoder = TinyDecoder()
    ids = prompt(5, 7)
    outs = run(make_engine(decoder), {0: [("r", ids, SamplingParams(max_tokens=3, logprobs=4, **GREEDY))]})["r"]
    tokens = list(ids)
    for out in outs:
        (entry,) = out.logprobs
        logits = decoder.reference_logits(tokens).astype(np.float64)
        expected = logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
        assert entry["token_id"] == out.new_token_ids[0] and entry["token"] == f"t{entry['token_id']}"
        assert entry["logprob"] == pytest.approx(expected[entry["token_id"]], abs=1e-9)
        assert [t["token_id"] for t in entry["top_logprobs"]] == list(np.argsort(-expected)[:4])
        tokens.append(entry["token_id"])


def test_abort_and_deadline_finish_with_abort_and_free_the_blocks() -> None:
    engine = make_engine()
    long = SamplingParams(max_tokens=100, ignore_eos=True, **GREEDY)
    engine.add_request("a", prompt(1, 30), long)
    engine.add_request("d", prompt(2, 30), long, deadline=engine.clock() + 3600)
    engine.add_request("k", prompt(3, 5), SamplingParams(max_tokens=8, ignore_eos=True, **GREEDY))
    for _ in range(3):
        engine.step()
    assert engine.blocks.num_free_blocks < engine.blocks.num_blocks - 8
    engine.abort("a")
    (out,) = [o for o in engine.step() if o.request_id == "a"]
    assert out.finished and out.finish_reason == "abort"
    start = engine.clock()
    engine.clock = lambda: start + 7200  # the deadline has passed
    engine.add_request("never", prompt(4, 5), long, deadline=start)
    late = {o.request_id: o for o in engine.step() if o.request_id in ("d", "never")}
    assert all(o.finished and o.finish_reason == "abort" for o in late.values()) and len(late) == 2
    assert late["never"].metrics.first_scheduled is None and late["d"].metrics.first_token is not None
    rest = run(engine)
    assert rest["k"][-1].finish_reason == "length"
    assert engine.blocks.num_free_blocks == engine.blocks.num_blocks and not engine.has_unfinished()


def test_a_failing_model_step_fails_that_steps_requests_and_the_engine_keeps_serving() -> None:
    engine = make_engine()
    engine.add_request("x", prompt(1, 6), SamplingParams(max_tokens=5, **GREEDY))
    engine.decoder.fail_next = True  # type: ignore[attr-defined]
    (out,) = engine.step()
    assert out.finished and out.finish_reason == "abort" and isinstance(out.error, RuntimeError)
    assert engine.blocks.num_free_blocks == engine.blocks.num_blocks
    requests = [("y", prompt(2, 6), 5)]
    _check_against_reference(
        engine, requests, run(engine, {0: [("y", requests[0][1], SamplingParams(max_tokens=5, **GREEDY))]})
    )


def test_a_failing_request_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    real = sampler_module._penalties

    def penalties(x, row, vocab):  # the request with presence_penalty 1.5 breaks the sampler
        if row.params.presence_penalty == 1.5:
            raise FloatingPointError("bad row")
        real(x, row, vocab)

    monkeypatch.setattr(sampler_module, "_penalties", penalties)
    engine = make_engine()
    bad = SamplingParams(max_tokens=5, presence_penalty=1.5, **GREEDY)
    requests = [(f"g{i}", prompt(600 + i, 5), 6) for i in range(3)]
    arrivals = {0: [(r, ids, SamplingParams(max_tokens=n, **GREEDY)) for r, ids, n in requests] + [("b", [1, 2], bad)]}
    outputs = run(engine, arrivals)
    assert isinstance(outputs["b"][-1].error, FloatingPointError) and outputs["b"][-1].finish_reason == "abort"
    _check_against_reference(engine, requests, {r: outputs[r] for r, _, _ in requests})


def test_add_request_refuses_what_it_cannot_serve_with_the_numbers() -> None:
    engine = make_engine(max_model_len=32, max_waiting=2)
    with pytest.raises(ValueError, match=r"30 tokens and max_tokens is 5: 35 is more than max_model_len 32"):
        engine.add_request("long", list(range(1, 31)), SamplingParams(max_tokens=5))
    with pytest.raises(ValueError, match="temperature"):
        engine.add_request("hot", [1], SamplingParams(temperature=3.0))
    with pytest.raises(ValueError, match=r"\[0, 48\)"):
        engine.add_request("oov", [1, 48], SamplingParams())
    with pytest.raises(ValueError, match="empty"):
        engine.add_request("empty", [], SamplingParams())
    engine.add_request("q1", [1], SamplingParams())
    with pytest.raises(ValueError, match="already in use"):
        engine.add_request("q1", [1], SamplingParams())
    engine.add_request("q2", [1], SamplingParams())
    with pytest.raises(QueueFull, match="max_waiting 2"):
        engine.add_request("q3", [1], SamplingParams())
    unbounded_params = SamplingParams(max_tokens=None, ignore_eos=True)
    unbounded = run(make_engine(max_model_len=20), {0: [("m", [1, 2], unbounded_params)]})["m"]
    assert unbounded[-1].completion_tokens == 18 and unbounded[-1].finish_reason == "length"


def test_a_kv_budget_below_one_sequence_is_refused_at_start() -> None:
    decoder = TinyDecoder()
    per_block = KVCache.bytes_per_block(decoder.spec, 16)
    with pytest.raises(ValueError, match=r"needs 4: raise kv_cache_bytes to at least"):
        LLMEngine(decoder, ToyTokenizer(), EngineConfig(max_model_len=64, kv_cache_bytes=3 * per_block))
