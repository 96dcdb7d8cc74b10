"""The sampler against references: transformers' warpers and repetition processor for the masks and the penalty,
OpenAI's formula for presence/frequency, the processed distribution for the sampling frequencies, and a seed that
gives the same tokens whatever shares the step."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from serve.generation import sampler as sampler_module
from serve.generation.sampler import Sampled, process_logits, sample
from serve.generation.sampling_params import SamplingParams

VOCAB = 64
EOS = frozenset({0})


@dataclass
class Row:
    params: SamplingParams
    token_ids: list[int] = field(default_factory=lambda: [1, 2, 3])
    num_prompt_tokens: int = 3
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))


def _logits(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 2, (rows, VOCAB)).astype(np.float32)  # (L, V)


@pytest.mark.parametrize(
    "fields",
    [dict(top_k=5), dict(top_p=0.8), dict(min_p=0.1), dict(top_k=10, top_p=0.5, min_p=0.05), dict(temperature=0.5,
                                                                                                   top_p=0.9)],
    ids=["top_k", "top_p", "min_p", "all", "temperature"],
)  # fmt: skip
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32 (sample's)"])
def test_masks_and_temperature_equal_transformers_warpers(fields: dict, dtype: type) -> None:
    torch = pytest.importorskip("torch")
    lp = pytest.importorskip("transformers.generation.logits_process")
    logits = _logits(8)
    params = SamplingParams(**fields)
    ours = process_logits(logits, [Row(params) for _ in range(8)], EOS, dtype=dtype)
    warpers = [lp.TemperatureLogitsWarper(params.temperature)]
    if params.top_k:
        warpers.append(lp.TopKLogitsWarper(params.top_k))
    if params.top_p < 1:
        warpers.append(lp.TopPLogitsWarper(params.top_p))
    if params.min_p:
        warpers.append(lp.MinPLogitsWarper(params.min_p))
    scores = torch.from_numpy(logits.astype(np.float64))
    for w in warpers:
        scores = w(None, scores)
    theirs = torch.log_softmax(scores, dim=-1).numpy()
    assert (np.isfinite(ours) == np.isfinite(theirs)).all()  # the same tokens kept, exactly
    kept = np.isfinite(theirs)
    tolerance = 1e-9 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(ours[kept], theirs[kept], rtol=tolerance, atol=tolerance)
    assert np.isfinite(ours).sum(axis=1).min() >= 1


def test_repetition_penalty_equals_transformers_and_presence_frequency_equal_openais_formula() -> None:
    torch = pytest.importorskip("torch")
    lp = pytest.importorskip("transformers.generation.logits_process")
    logits = _logits(1, seed=3)
    history = [5, 9, 9, 40, 5, 5, 63]  # prompt [5, 9, 9] + output [40, 5, 5, 63]
    rep = Row(SamplingParams(repetition_penalty=1.3), history, 3)
    ours = process_logits(logits, [rep], EOS)
    theirs = lp.RepetitionPenaltyLogitsProcessor(1.3)(torch.tensor([history]), torch.from_numpy(logits.astype(float)))
    np.testing.assert_allclose(ours, torch.log_softmax(theirs, -1).numpy(), rtol=1e-12, atol=1e-12)

    pf = Row(SamplingParams(presence_penalty=0.7, frequency_penalty=-0.4), history, 3)
    counts = np.bincount(history[3:], minlength=VOCAB)  # output tokens only (OpenAI's and vLLM's definition)
    expected = logits[0].astype(np.float64) - counts * -0.4 - (counts > 0) * 0.7
    expected -= np.log(np.exp(expected - expected.max()).sum()) + expected.max()
    np.testing.assert_allclose(process_logits(logits, [pf], EOS)[0], expected, rtol=1e-12, atol=1e-12)


def test_min_tokens_masks_eos_and_stop_token_ids_until_reached() -> None:
    params = SamplingParams(min_tokens=2, stop_token_ids=(7,))
    early = process_logits(_logits(1), [Row(params, [1, 2, 3, 4], 3)], EOS)[0]  # 1 output token
    assert np.isneginf(early[[0, 7]]).all() and np.isfinite(np.delete(early, [0, 7])).all()
    late = process_logits(_logits(1), [Row(params, [1, 2, 3, 4, 5], 3)], EOS)[0]  # 2 output tokens
    assert np.isfinite(late).all()
    ignore = process_logits(_logits(1), [Row(SamplingParams(min_tokens=2, ignore_eos=True), [1], 1)], EOS)[0]
    assert np.isfinite(ignore[0])


def test_sampling_frequencies_follow_the_processed_distribution() -> None:
    n = 6000
    logits = np.repeat(_logits(1, seed=5), n, axis=0)  # (n, V): the same distribution, one draw per row
    params = SamplingParams(temperature=0.8, top_k=8)
    rows = [Row(params, rng=np.random.default_rng(i)) for i in range(n)]
    tokens = np.array([r.token_id for r in sample(logits, rows, EOS)])  # type: ignore[union-attr]
    probs = np.exp(process_logits(logits[:1], rows[:1], EOS)[0])
    freq = np.bincount(tokens, minlength=VOCAB) / n
    assert set(np.flatnonzero(freq)) <= set(np.flatnonzero(probs))  # never a masked token
    assert np.abs(freq - probs).max() < 4 * np.sqrt(0.25 / n)  # within 4 standard deviations of the worst case


def test_greedy_is_the_argmax_and_draws_nothing() -> None:
    logits = _logits(4)
    rows = [Row(SamplingParams(temperature=0.0, top_k=3)) for _ in range(4)]
    states = [r.rng.bit_generator.state for r in rows]
    assert [r.token_id for r in sample(logits, rows, EOS)] == list(logits.argmax(axis=1))  # type: ignore[union-attr]
    assert [r.rng.bit_generator.state for r in rows] == states


def test_a_seed_gives_the_same_tokens_whatever_the_batch_mates() -> None:
    params = SamplingParams(temperature=1.0, top_p=0.9, seed=42)

    def draw(batch_mates: int, seed: int) -> list[int]:
        me = Row(params, rng=np.random.default_rng(42))
        others = [Row(SamplingParams(temperature=1.3), rng=np.random.default_rng(seed + i)) for i in range(batch_mates)]
        out = []
        for step in range(20):
            logits = _logits(1 + batch_mates, seed=step)
            logits[batch_mates] = _logits(1, seed=1000 + step)[0]  # my logits, wherever I sit
            rows = others + [me]
            out.append(sample(logits, rows, EOS)[batch_mates].token_id)  # type: ignore[union-attr]
        return out

    assert draw(0, 0) == draw(5, 1) == draw(11, 2)


def test_logprobs_and_top_logprobs() -> None:
    logits = _logits(2)
    rows = [Row(SamplingParams(temperature=0.0, logprobs=3)), Row(SamplingParams(temperature=1.0, logprobs=0))]
    processed = process_logits(logits, rows, EOS)
    first, second = sample(logits, rows, EOS)
    assert isinstance(first, Sampled) and isinstance(second, Sampled)
    assert first.logprob == pytest.approx(processed[0].max())
    assert [t for t, _ in first.top_logprobs or ()] == list(np.argsort(-processed[0])[:3])
    assert second.top_logprobs == [] and second.logprob == pytest.approx(processed[1, second.token_id])


def test_a_row_that_fails_fails_alone() -> None:
    logits = _logits(3)
    broken = Row(SamplingParams(temperature=1.0))
    broken.rng = None  # type: ignore[assignment]
    results = sample(logits, [Row(SamplingParams(temperature=0.0)), broken, Row(SamplingParams(temperature=0.0))], EOS)
    assert isinstance(results[1], AttributeError)
    assert [results[0].token_id, results[2].token_id] == [logits[0].argmax(), logits[2].argmax()]  # type: ignore[union-attr]


@pytest.mark.parametrize("scale", [0.3, 6.0], ids=["flat", "peaked"])
@pytest.mark.parametrize("top_p", [0.2, 0.95])
def test_top_p_sorting_only_the_likeliest_candidates_keeps_transformers_tokens(
    monkeypatch: pytest.MonkeyPatch, scale: float, top_p: float
) -> None:
    torch = pytest.importorskip("torch")
    lp = pytest.importorskip("transformers.generation.logits_process")
    monkeypatch.setattr(sampler_module, "TOP_P_CANDIDATES", 8)  # 8 first, then 64, 512: every branch runs
    monkeypatch.setattr(sampler_module, "SORT_BAND", 8)  # (a row of at most SORT_BAND is sorted whole)
    logits = np.random.default_rng(9).normal(0, scale, (6, 700)).astype(np.float32)
    ours = process_logits(logits, [Row(SamplingParams(top_p=top_p)) for _ in range(6)], EOS)
    theirs = lp.TopPLogitsWarper(top_p)(None, torch.from_numpy(logits.astype(np.float64))).numpy()
    assert (np.isfinite(ours) == np.isfinite(theirs)).all()
