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

Work only where a row needs it: a greedy row with no penalty, mask or logprobs is the raw argmax; temperature,
top_k and min_p are vectorized over the rows that have them; top_p and the penalties go row by row (top_p sorts
only the likeliest 1024 tokens when they hold top_p of the mass, a full sort of a 150k vocabulary costs ~40 ms).
When a pass fails, each row is retried alone so that one request's bad input fails that request only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from serve.generation.sampling_params import SamplingParams

__all__ = ["Sampled", "SamplerRow", "process_logits", "sample"]

TOP_P_CANDIDATES = 1024  # tokens sorted first for top_p; more only when they hold less than top_p of the mass


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
    x = _processed(logits, rows, eos_token_ids)
    peak = x.max(axis=1, keepdims=True)
    return x - (peak + np.log(np.exp(x - peak).sum(axis=1, keepdims=True)))  # log-softmax, (L, V)


def _processed(logits: np.ndarray, rows: Sequence[SamplerRow], eos_token_ids: frozenset[int]) -> np.ndarray:
    """Steps 1-4: the (L, vocab) float64 scores, masked ones -inf."""
    x = np.array(logits, dtype=np.float64)  # (L, V)
    vocab = x.shape[1]
    for i, row in enumerate(rows):
        _min_tokens(x[i], row, eos_token_ids, vocab)
        _penalties(x[i], row, vocab)
    temperature = np.array([r.params.temperature for r in rows])
    hot = temperature > 0
    x[hot] /= temperature[hot, None]
    _top_k(x, np.array([r.params.top_k for r in rows], np.int64))
    for i, row in enumerate(rows):
        if row.params.top_p < 1.0:
            _top_p(x[i], row.params.top_p)
    _min_p(x, np.array([r.params.min_p for r in rows]))
    return x


def _sample(logits: np.ndarray, rows: Sequence[SamplerRow], eos_token_ids: frozenset[int]) -> list[Sampled]:
    tokens = np.empty(len(rows), np.int64)
    plain = np.array([_plain_greedy(r, eos_token_ids) for r in rows])
    tokens[plain] = logits[plain].argmax(axis=1)  # nothing to process: the raw argmax
    rest = [int(i) for i in np.flatnonzero(~plain)]
    logprobs: dict[int, np.ndarray] = {}
    if rest:
        sub = [rows[i] for i in rest]
        x = _processed(logits[rest], sub, eos_token_ids)  # (R, V)
        peak = x.max(axis=1, keepdims=True)
        probs = np.exp(x - peak)  # (R, V), unnormalized
        for j, (i, row) in enumerate(zip(rest, sub)):
            if row.params.temperature > 0:  # inverse CDF: the first token whose cumulative mass exceeds u * total
                cdf = np.cumsum(probs[j])
                tokens[i] = min(int(np.searchsorted(cdf, row.rng.random() * cdf[-1], side="right")), len(cdf) - 1)
            else:
                tokens[i] = int(x[j].argmax())
            if row.params.logprobs is not None:
                logprobs[i] = x[j] - (peak[j] + np.log(probs[j].sum()))  # log-softmax, (V,)
    out = []
    for i, row in enumerate(rows):
        t = int(tokens[i])
        k = row.params.logprobs
        if k is None:
            out.append(Sampled(t))
            continue
        lp = logprobs[i]
        top = np.argsort(-lp, kind="stable")[:k] if k else np.array([], np.int64)
        out.append(Sampled(t, float(lp[t]), [(int(j), float(lp[j])) for j in top]))
    return out


def _plain_greedy(row: SamplerRow, eos_token_ids: frozenset[int]) -> bool:
    p = row.params
    masks = len(row.token_ids) - row.num_prompt_tokens < p.min_tokens and (p.stop_token_ids or not p.ignore_eos)
    penalties = p.repetition_penalty != 1.0 or p.presence_penalty or p.frequency_penalty
    return p.temperature == 0 and p.logprobs is None and not masks and not penalties


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
    vocab = x.shape[1]
    for i in np.flatnonzero((k > 0) & (k < vocab)):
        row = x[i]  # (V,), a view: masked in place
        kth = np.partition(row, vocab - k[i])[vocab - k[i]]  # the k-th largest
        row[row < kth] = -np.inf


def _top_p(x: np.ndarray, top_p: float) -> None:
    """Mask one row (V,) in place as transformers' TopPLogitsWarper does over a full ascending sort, but sorting
    only the likeliest tokens: when the `m` likeliest hold at least top_p of the mass, every other token's
    ascending cumulative mass is at most 1 - top_p, so it is dropped without being sorted."""
    p = np.exp(x - x.max())
    p /= p.sum()  # (V,)
    vocab, m = len(p), min(len(p), TOP_P_CANDIDATES)
    while True:
        top = np.argpartition(p, vocab - m)[vocab - m :] if m < vocab else np.arange(vocab)  # (m,) the m likeliest
        if m == vocab or p[top].sum() >= top_p:
            break
        m = min(vocab, 8 * m)
    order = top[np.argsort(p[top])]  # ascending
    cumulative = (1.0 - p[order].sum()) + np.cumsum(p[order])  # the mass of every token up to this one
    drop = cumulative <= 1.0 - top_p
    drop[-1] = False  # the most likely token always stays
    keep = np.zeros(vocab, bool)
    keep[order[~drop]] = True
    x[~keep] = -np.inf


def _min_p(x: np.ndarray, min_p: np.ndarray) -> None:
    rows = np.flatnonzero(min_p > 0.0)
    if rows.size:
        sub = x[rows]  # (R, V)
        probs = np.exp(sub - sub.max(axis=1, keepdims=True))  # relative to the largest, which is 1
        x[rows] = np.where(probs < min_p[rows, None], -np.inf, sub)
