"""The next token of every sequence of a step, each by its own request's SamplingParams.

    results = sample(logits, rows, eos_token_ids)   # one Sampled (or the exception of that row) per logits row

The processing, in vLLM's order (transformers' for the warpers), on float64 copies of the float32 logits:
1. min_tokens: EOS (unless ignore_eos) and the stop_token_ids are masked while fewer tokens were generated.
2. Penalties. repetition_penalty as transformers defines it (RepetitionPenaltyLogitsProcessor): every token of the
   prompt and the output has its logit divided by the penalty when positive, multiplied when negative.
   presence/frequency as OpenAI defines them, over the output tokens only:
   `logit[j] -= frequency_penalty * count[j] + presence_penalty * (count[j] > 0)`.
3. temperature: logits / temperature; temperature 0 is greedy (argmax, no division).
4. top_k (keep the logits >= the k-th largest, ties kept), then top_p (transformers' TopPLogitsWarper: sorted
   ascending, drop the tokens whose cumulative probability is <= 1 - top_p, always keep the most likely), then
   min_p (drop the tokens whose probability is below min_p times the largest one), each on what the previous left.
5. logprobs are the log-softmax of this processed distribution: the one the token was drawn from (with the penalties,
   temperature and masks). vLLM returns the raw model's by default; ours say how likely the chosen token was.
6. Sampling by inverse CDF with one uniform draw per sequence from the request's own numpy Generator: a seed
   determines the tokens whatever else shares the step, since nothing else draws from that generator.

Vectorized over the rows that need each stage (one sort for all top-k/top-p rows, one cumsum for all sampled rows);
the penalties loop over the rows that have them (their token histories differ in length). When a vectorized pass
fails, each row is retried alone so that one request's bad input fails that request only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from serve.generation.sampling_params import SamplingParams

__all__ = ["Sampled", "SamplerRow", "sample"]


class SamplerRow(Protocol):
    params: SamplingParams
    token_ids: list[int]  # prompt + output
    num_prompt_tokens: int
    rng: np.random.Generator


@dataclass
class Sampled:
    token_id: int
    logprob: float | None = None  # set when the request asked for logprobs
    top_logprobs: list[tuple[int, float]] | None = None  # the `params.logprobs` likeliest (token id, logprob)


def sample(logits: np.ndarray, rows: Sequence[SamplerRow], eos_token_ids: frozenset[int]) -> list[Sampled | Exception]:
    """One result per row of `logits` (L, vocab); a row whose processing raised gets its exception instead."""
    try:
        return list(_sample(logits, rows, eos_token_ids))
    except Exception:
        if len(rows) == 1:
            raise
    out: list[Sampled | Exception] = []
    for i, row in enumerate(rows):
        try:
            out.extend(_sample(logits[i : i + 1], [row], eos_token_ids))
        except Exception as e:  # this row's request fails, the others go on
            out.append(e)
    return out


def process_logits(logits: np.ndarray, rows: Sequence[SamplerRow], eos_token_ids: frozenset[int]) -> np.ndarray:
    """Steps 1-5: the (L, vocab) float64 log-probabilities each row's token is drawn from."""
    x = np.array(logits, dtype=np.float64)  # (L, V)
    vocab = x.shape[1]
    for i, row in enumerate(rows):
        _min_tokens(x[i], row, eos_token_ids, vocab)
        _penalties(x[i], row, vocab)
    temperature = np.array([r.params.temperature for r in rows])
    hot = temperature > 0
    x[hot] /= temperature[hot, None]
    _top_k(x, np.array([r.params.top_k for r in rows]))
    _top_p(x, np.array([r.params.top_p for r in rows]))
    _min_p(x, np.array([r.params.min_p for r in rows]))
    peak = x.max(axis=1, keepdims=True)
    return x - (peak + np.log(np.exp(x - peak).sum(axis=1, keepdims=True)))  # log-softmax, (L, V)


def _sample(logits: np.ndarray, rows: Sequence[SamplerRow], eos_token_ids: frozenset[int]) -> list[Sampled]:
    logprobs = process_logits(logits, rows, eos_token_ids)
    tokens = logprobs.argmax(axis=1)
    hot = np.array([r.params.temperature > 0 for r in rows])
    if hot.any():
        u = np.array([r.rng.random() for r, h in zip(rows, hot) if h])  # (H,)
        cdf = np.cumsum(np.exp(logprobs[hot]), axis=1)  # (H, V)
        drawn = (cdf <= (u * cdf[:, -1])[:, None]).sum(axis=1)  # first index whose cdf exceeds u * total
        tokens[hot] = np.minimum(drawn, logprobs.shape[1] - 1)
    out = []
    for i, row in enumerate(rows):
        t = int(tokens[i])
        k = row.params.logprobs
        if k is None:
            out.append(Sampled(t))
            continue
        top = np.argsort(-logprobs[i], kind="stable")[:k] if k else np.array([], np.int64)
        out.append(Sampled(t, float(logprobs[i, t]), [(int(j), float(logprobs[i, j])) for j in top]))
    return out


def _min_tokens(x: np.ndarray, row: SamplerRow, eos_token_ids: frozenset[int], vocab: int) -> None:
    p = row.params
    if len(row.token_ids) - row.num_prompt_tokens >= p.min_tokens:
        return
    banned = set(p.stop_token_ids) | (set() if p.ignore_eos else set(eos_token_ids))
    x[[t for t in banned if 0 <= t < vocab]] = -np.inf


def _penalties(x: np.ndarray, row: SamplerRow, vocab: int) -> None:
    p = row.params
    if p.repetition_penalty != 1.0:
        seen = np.unique(np.asarray(row.token_ids, np.int64))
        seen = seen[(seen >= 0) & (seen < vocab)]
        v = x[seen]
        x[seen] = np.where(v < 0, v * p.repetition_penalty, v / p.repetition_penalty)
    if p.presence_penalty or p.frequency_penalty:
        output = np.asarray(row.token_ids[row.num_prompt_tokens :], np.int64)
        counts = np.bincount(output[(output >= 0) & (output < vocab)], minlength=vocab)  # (V,)
        x -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0)


def _top_k(x: np.ndarray, k: np.ndarray) -> None:
    rows = np.flatnonzero((k > 0) & (k < x.shape[1]))
    if rows.size:
        ks = k[rows]
        if (ks == ks[0]).all():  # one k: a partition, not a sort
            ordered = -np.partition(-x[rows], int(ks[0]) - 1, axis=1)  # (R, V), the k-th largest at k-1
        else:
            ordered = -np.sort(-x[rows], axis=1)  # (R, V) descending
        threshold = ordered[np.arange(rows.size), ks - 1]  # (R,)
        x[rows] = np.where(x[rows] < threshold[:, None], -np.inf, x[rows])


def _top_p(x: np.ndarray, top_p: np.ndarray) -> None:
    rows = np.flatnonzero(top_p < 1.0)
    if not rows.size:
        return
    sub = x[rows]  # (R, V)
    order = np.argsort(sub, axis=1)  # ascending
    ordered = np.take_along_axis(sub, order, axis=1)
    probs = np.exp(ordered - ordered[:, -1:])
    cumulative = np.cumsum(probs / probs.sum(axis=1, keepdims=True), axis=1)
    drop = cumulative <= (1.0 - top_p[rows])[:, None]
    drop[:, -1] = False  # the most likely token always stays
    np.put_along_axis(sub, order, np.where(drop, -np.inf, ordered), axis=1)
    x[rows] = sub


def _min_p(x: np.ndarray, min_p: np.ndarray) -> None:
    rows = np.flatnonzero(min_p > 0.0)
    if rows.size:
        sub = x[rows]  # (R, V)
        probs = np.exp(sub - sub.max(axis=1, keepdims=True))  # relative to the largest, which is 1
        x[rows] = np.where(probs < min_p[rows, None], -np.inf, sub)
