"""The sampler's fast paths on large vocabularies against transformers' warpers and dense references: top_k's pruned
partition (and its fallback), top_p's growing candidate set, its bisection of a flat row and ties at its cut,
min_p's threshold, the blocked inverse CDF, top_logprobs beyond the kept tokens, and `sample` against a dense
float64 draw with the same uniform."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from serve.generation import sampler as sampler_module
from serve.generation.sampler import Sampled, process_logits, sample
from serve.generation.sampling_params import SamplingParams

EOS = frozenset({0})


@dataclass
class Row:
    params: SamplingParams
    token_ids: list[int] = field(default_factory=lambda: [1, 2, 3])
    num_prompt_tokens: int = 3
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))


def _lm(vocab: int, lifted: int, seed: int) -> np.ndarray:
    """One row (vocab,) of noise N(0, 2) with `lifted` tokens 6-14 above it (0: flat noise)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 2.0, vocab)
    x[rng.choice(vocab, lifted, replace=False)] += rng.uniform(6.0, 14.0, lifted)
    return x.astype(np.float32)


def _theirs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """transformers' warpers in float64 on (L, V): the processed scores, masked ones -inf."""
    torch = pytest.importorskip("torch")
    lp = pytest.importorskip("transformers.generation.logits_process")
    scores = torch.from_numpy(logits.astype(np.float64))
    if params.temperature not in (0.0, 1.0):
        scores = lp.TemperatureLogitsWarper(params.temperature)(None, scores)
    if params.top_k:
        scores = lp.TopKLogitsWarper(params.top_k)(None, scores)
    if params.top_p < 1:
        scores = lp.TopPLogitsWarper(params.top_p)(None, scores)
    if params.min_p:
        scores = lp.MinPLogitsWarper(params.min_p)(None, scores)
    return scores.numpy()


def _assert_same_tokens(logits: np.ndarray, params: SamplingParams, dtype: type = np.float64) -> np.ndarray:
    ours = process_logits(logits, [Row(params) for _ in logits], EOS, dtype=dtype)
    theirs = _theirs(logits, params)
    for i in range(len(logits)):
        differ = np.flatnonzero(np.isfinite(ours[i]) != np.isfinite(theirs[i]))
        assert not differ.size, f"row {i}: tokens {differ[:10]} kept by one side only"
    return ours


@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.99])
def test_top_p_grows_its_candidates_and_bisects_flat_rows_as_transformers(
    monkeypatch: pytest.MonkeyPatch, top_p: float
) -> None:
    vocab = 50_000
    logits = np.stack([_lm(vocab, 20, 1), _lm(vocab, 300, 2), _lm(vocab, 3000, 3), _lm(vocab, 0, 4)])  # (4, V)
    sizes: list[int] = []
    top = sampler_module._top_positions

    def spy(v: np.ndarray, k: int) -> np.ndarray:
        sizes.append(k)
        return top(v, k)

    monkeypatch.setattr(sampler_module, "_top_positions", spy)
    kept = np.isfinite(_assert_same_tokens(logits, SamplingParams(top_p=top_p))).sum(axis=1)
    assert 64 * 8 in sizes  # the 64 likeliest were too few somewhere: the candidates grew
    assert kept[3] > 1000  # the flat row needed a good part of the vocabulary
    monkeypatch.setattr(sampler_module, "SORT_BAND", 16)  # bisect down to 16 tokens
    _assert_same_tokens(logits, SamplingParams(top_p=top_p))


def _stable_top_p(x: np.ndarray, top_p: float) -> np.ndarray:
    """transformers' TopPLogitsWarper with a stable sort, in numpy on one row: the kept mask. (torch.sort, not
    stable, orders a large block of ties its own way, so transformers drops an arbitrary few of them.)"""
    order = np.argsort(x, kind="stable")  # ascending; ties by id
    probs = np.exp(x[order] - x.max())
    drop = np.cumsum(probs / probs.sum()) <= 1 - top_p
    drop[-1] = False
    keep = np.ones(len(x), bool)
    keep[order[drop]] = False
    return keep


def _assert_same_cut_with_ties(logits: np.ndarray, top_p: float) -> np.ndarray:
    """The kept tokens of a stable top_p, and as many as transformers keeps: ties at the cut drop the lowest ids."""
    ours = np.isfinite(process_logits(logits, [Row(SamplingParams(top_p=top_p)) for _ in logits], EOS))
    theirs = np.isfinite(_theirs(logits, SamplingParams(top_p=top_p)))
    for i, x in enumerate(logits.astype(np.float64)):
        assert (ours[i] == _stable_top_p(x, top_p)).all()
        assert ours[i].sum() == theirs[i].sum()
    return ours


def test_top_p_that_needs_almost_the_whole_vocabulary() -> None:
    vocab = 19_997
    logits = np.stack([_lm(vocab, 0, 5), np.zeros(vocab, np.float32)])  # noise, and a uniform row
    kept = _assert_same_cut_with_ties(logits, 0.999).sum(axis=1)
    _assert_same_tokens(logits[:1], SamplingParams(top_p=0.999))
    assert kept[0] > 15_000 and kept[1] == vocab - 19  # the uniform row: 19 tokens of 1 / vocab dropped


@pytest.mark.parametrize("top_p", [0.5, 0.6, 0.7, 0.8])
def test_ties_at_the_top_p_cut_drop_the_lowest_ids_first_as_transformers(top_p: float) -> None:
    small = np.zeros((1, 12), np.float32)
    small[0, 5] = 2.0  # one likely token, eleven tied ones: the cut falls among the ties
    ours = _assert_same_tokens(small, SamplingParams(top_p=top_p))  # exactly: torch sorts 12 values stably
    kept = np.flatnonzero(np.isfinite(ours[0]))
    tied = [i for i in range(12) if i != 5]
    assert 5 in kept and 1 < len(kept) < 12 and list(kept[kept != 5]) == tied[-(len(kept) - 1) :]  # highest ids


@pytest.mark.parametrize("sort_band", [2048, 16])
def test_ties_at_the_cut_of_a_large_row_across_the_bisection(monkeypatch: pytest.MonkeyPatch, sort_band: int) -> None:
    monkeypatch.setattr(sampler_module, "SORT_BAND", sort_band)
    logits = np.zeros((2, 29_999), np.float32)
    logits[0, ::7] = 1.0  # two levels, each a block of ties
    logits[1, ::3] = 0.5
    logits[1, 100:160] = 4.0
    for top_p in (0.3, 0.5, 0.9):
        _assert_same_cut_with_ties(logits, top_p)


@pytest.mark.parametrize("layout", ["random", "top_on_the_stride", "top_off_the_stride", "ties"])
@pytest.mark.parametrize("k", [1, 50, 700])
def test_top_k_on_a_large_row_by_pruned_partition(layout: str, k: int) -> None:
    vocab = 50_000
    x = np.random.default_rng(k).normal(0.0, 2.0, vocab).astype(np.float32)
    if layout == "top_on_the_stride":  # the strided sample holds the row's largest: its threshold is too high
        x[:: sampler_module.PRUNE_STRIDE] += 20.0
    elif layout == "top_off_the_stride":  # the sample holds none of them: its threshold is low
        x[1 :: sampler_module.PRUNE_STRIDE] += 20.0
    elif layout == "ties":
        x = np.round(x, 1)  # many tokens share the k-th value
    ours = _assert_same_tokens(x[None], SamplingParams(top_k=k))
    assert np.isfinite(ours).sum() >= k


@pytest.mark.parametrize("min_p", [0.001, 0.05, 0.5])
def test_min_p_by_a_threshold_on_the_max(min_p: float) -> None:
    logits = np.stack([_lm(50_000, 30, 6), _lm(50_000, 0, 7)])
    _assert_same_tokens(logits, SamplingParams(min_p=min_p))
    _assert_same_tokens(logits, SamplingParams(temperature=0.7, top_k=500, top_p=0.9, min_p=min_p))


@pytest.mark.parametrize("fields", [dict(top_k=40), dict(top_p=0.9), dict(min_p=0.02), dict(top_k=200, top_p=0.8)])
def test_the_float32_path_keeps_transformers_tokens(fields: dict) -> None:
    logits = np.stack([_lm(50_000, 30, 8), _lm(50_000, 400, 9)])
    ours = _assert_same_tokens(logits, SamplingParams(**fields), dtype=np.float32)
    reference = process_logits(logits, [Row(SamplingParams(**fields))] * 2, EOS)  # float64
    kept = np.isfinite(ours)
    np.testing.assert_allclose(ours[kept], reference[kept], rtol=1e-5, atol=1e-5)


def _dense_draw(logprobs: np.ndarray, u: float) -> int:
    """The plain inverse CDF over the whole row in float64: the first token whose cumulative mass exceeds u."""
    cdf = np.cumsum(np.exp(logprobs))
    return min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), len(cdf) - 1)


def test_the_blocked_inverse_cdf_draws_what_a_dense_cumulative_sum_draws() -> None:
    vals = np.random.default_rng(10).normal(0.0, 1.5, 5000)
    vals[1024:2048] = -np.inf  # a whole block without mass
    vals[3000:3100] = -np.inf
    lp = vals - np.log(np.exp(vals - vals.max()).sum()) - vals.max()
    for u in np.random.default_rng(11).random(3000):
        token = sampler_module._draw(vals, float(u))
        assert token == _dense_draw(lp, float(u)) and np.isfinite(vals[token])
    assert sampler_module._draw(vals, 0.0) == 0 and np.isfinite(vals[sampler_module._draw(vals, 1 - 1e-16)])


@pytest.mark.parametrize(
    "fields",
    [dict(temperature=1.0), dict(top_p=0.9), dict(top_k=50, temperature=0.8), dict(min_p=0.05),
     dict(repetition_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.4, top_p=0.95),
     dict(min_tokens=5, top_p=0.9, logprobs=3)],
    ids=["temperature", "top_p", "top_k", "min_p", "penalties", "min_tokens"],
)  # fmt: skip
def test_sample_draws_the_dense_float64_reference_token(fields: dict) -> None:
    vocab = 40_000
    logits = np.stack([_lm(vocab, 60, 20 + i) for i in range(6)])  # (6, V)
    logits[:, 0] = logits.max() + 3.0  # EOS the likeliest: min_tokens must mask it
    given = logits.copy()
    params = SamplingParams(**fields)
    history = [[5, 9, int(np.argmax(logits[i])), 7, 9] for i in range(6)]  # the penalties touch the likeliest
    rows = [Row(params, history[i], 2, np.random.default_rng(i)) for i in range(6)]
    reference = process_logits(logits, [Row(params, history[i], 2) for i in range(6)], EOS)  # float64
    results = sample(logits, rows, EOS)
    for i, result in enumerate(results):
        assert isinstance(result, Sampled)
        assert result.token_id == _dense_draw(reference[i], float(np.random.default_rng(i).random()))
        assert result.token_id != 0 or not params.min_tokens
    np.testing.assert_array_equal(logits, given)  # rows are read in place, never written


def test_top_logprobs_beyond_the_kept_tokens_follow_a_stable_sort_of_the_dense_row() -> None:
    logits = np.stack([_lm(3000, 10, 30), _lm(3000, 10, 31)])
    rows = [Row(SamplingParams(temperature=0.0, top_k=2, logprobs=5)), Row(SamplingParams(top_p=0.5, logprobs=4))]
    dense = process_logits(logits, rows, EOS)
    for row, result, lp in zip(rows, sample(logits, rows, EOS), dense):
        assert isinstance(result, Sampled) and result.top_logprobs is not None
        expected = np.argsort(-lp, kind="stable")[: row.params.logprobs]  # -inf ones by id after the kept
        assert [t for t, _ in result.top_logprobs] == list(expected)
        np.testing.assert_allclose([v for _, v in result.top_logprobs], lp[expected], rtol=1e-5)
        assert result.logprob == pytest.approx(lp[result.token_id], rel=1e-5)
    first = sample(logits, rows, EOS)[0]
    assert isinstance(first, Sampled) and first.token_id == int(np.argmax(dense[0]))  # greedy: the argmax
