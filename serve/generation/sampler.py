"""The next token of every sequence of a step, each by its own request's SamplingParams.

    results = sample(logits, rows, eos_token_ids)   # one Sampled (or the exception of that row) per logits row

The processing, in vLLM's order (transformers' for the warpers):
1. min_tokens: EOS (unless ignore_eos) and the stop_token_ids are masked while fewer tokens were generated.
2. Penalties. repetition_penalty as transformers defines it (RepetitionPenaltyLogitsProcessor): every token of the
   prompt and the output has its logit divided by the penalty when positive, multiplied when negative.
   presence/frequency as OpenAI defines them, over the output tokens only:
   `logit[j] -= frequency_penalty * count[j] + presence_penalty * (count[j] > 0)`.
3. temperature: logits / temperature; temperature 0 is greedy (argmax, no division).
4. top_k (keep the logits >= the k-th largest, ties kept), then top_p (transformers' TopPLogitsWarper: sorted
   ascending, stable, drop the tokens whose cumulative probability is <= 1 - top_p, always keep the most likely),
   then min_p (drop the tokens whose probability is below min_p times the largest one), each on what the previous
   left.
5. logprobs are the log-softmax of this processed distribution: the one the token was drawn from (with the penalties,
   temperature and masks). vLLM returns the raw model's by default; ours say how likely the chosen token was.
6. Sampling by inverse CDF with one uniform draw per sequence from the request's own numpy Generator: a seed
   determines the tokens whatever else shares the step, since nothing else draws from that generator.

Speed (a decode step of a small model at batch 16 takes a few ms; the sampler must cost less). Decisions:
- Row by row, on row-sized arrays: a (rows, vocab) temporary of a 152k vocabulary is 10-40 MB of fresh pages per
  operation, slower than the per-row loop it would save; a row (600 KB) stays in cache. Measured on the inverse
  CDF alone: 64 x 152k rows 29 ms row by row, 71 ms on (rows, vocab) arrays; 64 x 32k 6.5 vs 8.1 ms; only at a
  toy vocabulary (64 x 1000: 1.2 vs 0.8 ms) does the vectorized form win. A batch of plain greedy rows (no
  penalty, mask or logprobs) is one argmax over the batch. The logits row is read in place and copied only when a
  penalty, mask or temperature changes it.
- float32 scores (the model's own precision: a float64 copy buys nothing for masks or draws); float64 where a sum
  runs long: the log-softmax of logprobs, the cumulative sum of top_p (over its candidates), and the inverse CDF
  (block sums of 1024 tokens, then a cumulative sum inside the chosen block). `process_logits` runs the same code
  in float64 by default: the reference the tests hold against transformers' warpers (float32 too, within 1e-5).
- No full sort of the vocabulary. top_k: the k-th largest by partition, after a strided sample's threshold has
  pruned the row (exact: any threshold with >= k tokens above it keeps the k-th largest). top_p: the candidates
  are the 64 likeliest tokens (8x more while they hold less than top_p of the mass); every other token's ascending
  cumulative mass is then at most 1 - top_p, so transformers would drop it too. A flat row (top_p needing much of
  the vocabulary) is narrowed by thresholds read off a strided sample, and at most SORT_BAND values are sorted.
  Ties at top_p's cut drop the lowest token ids first, as a stable ascending sort does (transformers' torch.sort
  does so on short rows; on long ones it orders a block of ties its own way: the same number dropped, other ids).
  min_p: a threshold on the max in logit space (with a margin) finds the candidates, the exact probability test
  runs on those. Penalties touch only the tokens the sequence has seen. A short row (<= SORT_BAND tokens for
  top_p, <= DRAW_BLOCK for the draw) skips the selection machinery: a sort or one cumulative sum is cheaper there.
- A greedy row without logprobs is the argmax after the penalties and min_tokens: top_k/top_p/min_p always keep
  the most likely token (where top_p would drop one of several tied maxima, the first by token id wins).
- After the warpers a row is a candidate set (token ids ascending, their scores) or the whole vocabulary; the draw
  and the logprobs work on that set, so the tokens and the top_logprobs order (ties by token id) are those of
  the dense computation.
When a pass fails, each row is retried alone so that one request's bad input fails that request only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from serve.generation.sampling_params import SamplingParams

__all__ = ["Sampled", "SamplerRow", "process_logits", "sample"]

TOP_P_CANDIDATES = 64  # tokens first taken as top_p's candidates; GROWTH x more while they hold less than top_p
GROWTH = 8
SORT_BAND = 2048  # top_p sorts at most about this many tokens (more only when they tie)
DRAW_BLOCK = 1024  # tokens per block sum of the inverse CDF
PRUNE_STRIDE = 16  # top_k on a long row: the threshold from every 16th token first
PRUNE_MIN = 4096  # rows shorter than this are partitioned directly
MIN_P_MARGIN = 1e-3  # nats below log(min_p) still checked exactly (float32 rounding is far smaller)


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


def process_logits(
    logits: np.ndarray, rows: Sequence[SamplerRow], eos_token_ids: frozenset[int], dtype: type = np.float64
) -> np.ndarray:
    """Steps 1-5: the (L, vocab) float64 log-probabilities each row's token is drawn from, computed in `dtype`
    (float64 by default: the reference; `sample` computes in float32) up to the log-softmax."""
    out = np.full(logits.shape, -np.inf)  # (L, V)
    for i, row in enumerate(rows):
        idx, vals = _warp(_scores(logits[i], row, eos_token_ids, dtype), row.params)
        lp = _log_softmax(vals)
        if idx is None:
            out[i] = lp
        else:
            out[i, idx] = lp
    return out


def _sample(logits: np.ndarray, rows: Sequence[SamplerRow], eos_token_ids: frozenset[int]) -> list[Sampled]:
    plain = [_plain_greedy(row, eos_token_ids) for row in rows]
    if all(plain):  # the common greedy batch: nothing to process, the raw argmax of every row at once
        return [Sampled(int(t)) for t in logits.argmax(axis=1)]
    out = []
    for i, row in enumerate(rows):
        p = row.params
        if plain[i]:
            out.append(Sampled(int(logits[i].argmax())))
            continue
        x = _scores(logits[i], row, eos_token_ids, np.float32)  # (V,)
        if p.temperature == 0 and p.logprobs is None:
            out.append(Sampled(int(x.argmax())))
            continue
        idx, vals = _warp(x, p)
        j = int(vals.argmax()) if p.temperature == 0 else _draw(vals, row.rng.random())
        token = j if idx is None else int(idx[j])
        if p.logprobs is None:
            out.append(Sampled(token))
            continue
        lp = _log_softmax(vals)  # float64
        out.append(Sampled(token, float(lp[j]), _top_logprobs(idx, lp, p.logprobs, len(x))))
    return out


def _plain_greedy(row: SamplerRow, eos_token_ids: frozenset[int]) -> bool:
    p = row.params
    return p.temperature == 0 and p.logprobs is None and not _masks(row) and not _penalized(p)


def _masks(row: SamplerRow) -> bool:
    p = row.params
    return len(row.token_ids) - row.num_prompt_tokens < p.min_tokens and bool(p.stop_token_ids or not p.ignore_eos)


def _penalized(p: SamplingParams) -> bool:
    return p.repetition_penalty != 1.0 or bool(p.presence_penalty) or bool(p.frequency_penalty)


def _scores(logits: np.ndarray, row: SamplerRow, eos_token_ids: frozenset[int], dtype: type) -> np.ndarray:
    """Steps 1-3 on one row (V,): a new array when something changes it or the dtype differs, else `logits`."""
    p = row.params
    x = logits
    if _masks(row) or _penalized(p) or x.dtype != dtype:
        x = np.array(logits, dtype=dtype)  # (V,), ours to change
        _min_tokens(x, row, eos_token_ids)
        _penalties(x, row, len(x))
    if p.temperature not in (0.0, 1.0):
        x = np.divide(x, p.temperature, out=x if x is not logits else None, dtype=dtype)
    return x


def _min_tokens(x: np.ndarray, row: SamplerRow, eos_token_ids: frozenset[int]) -> None:
    p = row.params
    if not _masks(row):
        return
    banned = set(p.stop_token_ids) | (set() if p.ignore_eos else set(eos_token_ids))
    x[[t for t in banned if 0 <= t < len(x)]] = -np.inf


def _penalties(x: np.ndarray, row: SamplerRow, vocab: int) -> None:
    """Sparse: only the tokens the sequence has seen are read and written."""
    p = row.params
    if p.repetition_penalty != 1.0:
        seen = np.asarray(row.token_ids, np.int64)  # repeats write the same value: no need to dedupe
        seen = seen[(seen >= 0) & (seen < vocab)]
        v = x[seen]
        x[seen] = np.where(v < 0, v * p.repetition_penalty, v / p.repetition_penalty)
    if p.presence_penalty or p.frequency_penalty:
        ids = np.sort(np.asarray(row.token_ids[row.num_prompt_tokens :], np.int64))
        ids = ids[(ids >= 0) & (ids < vocab)]
        if ids.size:  # each distinct id and its count, from the sorted ids (cheaper than np.unique's)
            first = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
            counts = np.diff(np.append(first, ids.size))
            x[ids[first]] -= p.frequency_penalty * counts + p.presence_penalty  # every count here is > 0


def _warp(x: np.ndarray, p: SamplingParams) -> tuple[np.ndarray | None, np.ndarray]:
    """Step 4 on one row's scores (V,): (the kept token ids ascending, their scores), or (None, x) when all stay."""
    idx: np.ndarray | None = None
    vals = x
    for keep in (_top_k, _top_p, _min_p):
        pos = keep(vals, p)  # positions in vals, ascending, or None: all of them
        if pos is not None:
            idx = pos if idx is None else idx[pos]
            vals = vals[pos]
    return idx, vals


def _top_k(v: np.ndarray, p: SamplingParams) -> np.ndarray | None:
    return _top_positions(v, p.top_k) if 0 < p.top_k < len(v) else None


def _top_positions(v: np.ndarray, k: int) -> np.ndarray:
    """The positions (ascending) of every value >= the k-th largest of v (n,): ties at the k-th kept."""
    n = len(v)
    if n >= PRUNE_MIN and k * PRUNE_STRIDE * 4 <= n:
        sample = v[::PRUNE_STRIDE]  # (n / stride,)
        rank = min(len(sample), 2 * (k // PRUNE_STRIDE) + 16)  # below the k-th largest's likely place in the sample
        pos = np.flatnonzero(v >= np.partition(sample, len(sample) - rank)[len(sample) - rank])
        if len(pos) >= k:  # the k-th largest is among them
            vals = v[pos]
            return pos[vals >= np.partition(vals, len(vals) - k)[len(vals) - k]]
    return np.flatnonzero(v >= np.partition(v, n - k)[n - k])


def _top_p(v: np.ndarray, p: SamplingParams) -> np.ndarray | None:
    """transformers' TopPLogitsWarper by selection instead of a full sort. Any threshold t splits the row: when the
    tokens at least as likely as t hold top_p of the mass, every less likely token's ascending cumulative mass is
    at most 1 - top_p (dropped); when they hold less, each of them has less than top_p after it (kept). The
    likeliest TOP_P_CANDIDATES (GROWTH x more while too few) settle a peaked row; on a flat one, thresholds read off
    a strided sample of the band around where its mass crosses top_p narrow the band, and only the last band
    (<= SORT_BAND tokens) is sorted: the cut and its ties lie inside it."""
    top_p = p.top_p
    if top_p >= 1.0:
        return None
    probs = v - v.max()  # (n,)
    np.exp(probs, out=probs)  # unnormalized probabilities, the largest 1
    total = float(probs.sum(dtype=np.float64))
    n, size = len(probs), TOP_P_CANDIDATES
    sure, sure_mass = np.inf, 0.0  # the tokens at least this likely are kept; their normalized mass
    pos: np.ndarray | None = None  # the candidates' positions (None: all), and their values
    cand = probs
    while n > SORT_BAND and size < n and (n < PRUNE_MIN or size * PRUNE_STRIDE * 4 <= n):  # a short row: sorted
        top = _top_positions(probs, size)
        values = probs[top]
        mass = float(values.sum(dtype=np.float64)) / total
        if mass >= top_p:
            pos, cand = top, values
            break
        sure, sure_mass, size = float(values.min()), mass, size * GROWTH
        if mass * GROWTH < top_p:  # GROWTH x as many tokens, none likelier than these, cannot hold top_p either
            break
    band = np.compress(cand < sure, cand)  # (b,) values; the cut is among them
    while len(band) > SORT_BAND:
        before = len(band)
        sample = np.sort(band[::PRUNE_STRIDE])[::-1]  # (b / stride,) descending
        estimate = sure_mass + np.cumsum(sample, dtype=np.float64) * (PRUNE_STRIDE / total)  # mass >= each
        i = int(np.searchsorted(estimate, top_p))
        margin = 8 + int(2 * np.sqrt(i + 1))  # sampling error of the crossing's rank, with room
        for t in (sample[max(i - margin, 0)], sample[min(i + margin, len(sample) - 1)]):
            upper = band >= t
            above = np.compress(upper, band)  # (compress: several times faster than a boolean index here)
            mass = sure_mass + float(above.sum(dtype=np.float64)) / total
            if mass < top_p:
                band, sure, sure_mass = np.compress(~upper, band), t, mass
            else:
                band = above
        if len(band) == before:
            break  # ties: sort them
    ordered = np.sort(band)  # ascending values; the ids come from comparisons with the cut
    scaled = ordered.astype(np.float64) / total
    cumulative = (1.0 - sure_mass - float(scaled.sum())) + np.cumsum(scaled)  # float64: the mass up to each token
    dropped = int(np.searchsorted(cumulative, 1.0 - top_p, side="right"))
    if sure == np.inf:
        dropped = min(dropped, len(ordered) - 1)  # the most likely token always stays
    if dropped == len(ordered):  # the whole band goes: the sure tokens stay
        kept = np.flatnonzero(cand >= sure)
    else:
        cut = ordered[dropped]  # the least likely kept probability
        keep = cand > cut
        ties = np.flatnonzero(cand == cut)  # of these a stable ascending sort drops the lowest ids first
        keep[ties[dropped - int(np.searchsorted(ordered, cut, side="left")) :]] = True
        kept = np.flatnonzero(keep)
    return kept if pos is None else pos[kept]


def _min_p(v: np.ndarray, p: SamplingParams) -> np.ndarray | None:
    if p.min_p <= 0.0:
        return None
    peak = v.max()
    pos = np.flatnonzero(v >= peak + (np.log(p.min_p) - MIN_P_MARGIN))  # a superset of the kept tokens
    return pos[~(np.exp(v[pos] - peak) < p.min_p)]  # the probability relative to the largest, as transformers


def _draw(vals: np.ndarray, u: float) -> int:
    """Inverse CDF: the first position whose cumulative mass exceeds u * total (float64 block sums, then a
    cumulative sum inside the chosen block)."""
    w = vals - vals.max()  # (n,)
    np.exp(w, out=w)  # unnormalized probabilities
    if len(w) <= DRAW_BLOCK:  # one block: its cumulative sum directly
        cdf = np.cumsum(w.astype(np.float64))
        return min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), int(np.flatnonzero(w)[-1]))
    starts = np.arange(0, len(w), DRAW_BLOCK)
    cum = np.cumsum(np.add.reduceat(w, starts, dtype=np.float64))  # (blocks,)
    target = u * cum[-1]
    b = min(int(np.searchsorted(cum, target, side="right")), len(cum) - 1)
    block = w[starts[b] : starts[b] + DRAW_BLOCK].astype(np.float64)
    inside = np.cumsum(block) + (cum[b - 1] if b else 0.0)
    j = int(np.searchsorted(inside, target, side="right"))
    if j >= len(block) or block[j] == 0.0:  # past the end by rounding: the block's last likely token
        j = int(np.flatnonzero(block)[-1])
    return int(starts[b]) + j


def _log_softmax(vals: np.ndarray) -> np.ndarray:
    x = vals.astype(np.float64)
    peak = x.max()
    return x - (peak + np.log(np.exp(x - peak).sum()))


def _top_logprobs(idx: np.ndarray | None, lp: np.ndarray, k: int, vocab: int) -> list[tuple[int, float]]:
    """The k likeliest (token id, logprob), ties by token id (a stable sort of the dense row), -inf ones last."""
    if k == 0:
        return []
    n = len(lp)
    sel = np.arange(n) if k >= n else _top_positions(lp, k)
    sel = sel[np.isfinite(lp[sel])]
    ids = sel if idx is None else idx[sel]
    top = [(int(ids[o]), float(lp[sel[o]])) for o in np.lexsort((ids, -lp[sel]))[:k]]
    taken = {t for t, _ in top}
    j = 0
    while len(top) < k and j < vocab:  # fewer finite than asked: the masked ones follow by id
        if j not in taken:
            top.append((j, float("-inf")))
        j += 1
    return top
