"""Attention of one step's ragged batch over the paged KV cache (step.py's KVCache and StepBatch).

Decisions, and why:
- The step's K and V are written to their slots first, then every sequence attends over its blocks in the cache:
  one place holds earlier and new tokens alike, so a prefill chunk, a decode and a prompt whose prefix blocks came
  from the prefix cache are the same code.
- Per sequence, one gather of its blocks ((ctx, kv_heads, head_dim)) and two batched matmuls over the KV head
  groups: GQA never materialises repeated K/V, the query heads of a group share their K/V head as (G*n, head_dim)
  rows. Head h belongs to KV head h // G, transformers' `repeat_kv` order.
- The mask is by position, not by row: new row r of a sequence is at `positions[r]`, cache entry j is position j,
  and r sees j when j <= positions[r] (and j > positions[r] - window with a sliding window, transformers' rule).
  A sliding window also trims the gather to the keys any new row can see.
- A decode-only step (one new row per sequence, the steady state) runs all sequences at once: one gather of
  every sequence's blocks padded to the longest, one batched product, the padding (and what a window leaves out)
  masked; no Python loop over sequences. Where serve's native kernels are loaded, that step is one call of
  serve.backend.cpu_paged instead (keys and values read in place through the block tables, no gathered copies).
- `scale` (default 1/sqrt(head_dim); Gemma's query_pre_attn_scalar**-0.5) multiplies q, and `softcap` (Gemma 2's
  attn_logit_softcapping) bounds the scores as softcap * tanh(scores / softcap) before the mask, transformers' order.
"""

from __future__ import annotations

import numpy as np

from serve.backend import cpu_paged
from serve.zoo.decoders.step import KVCache, StepBatch

__all__ = ["paged_attention"]


def paged_attention(
    q: np.ndarray, cache: KVCache, layer: int, batch: StepBatch, window: int | None,
    scale: float | None = None, softcap: float | None = None,
) -> np.ndarray:  # fmt: skip
    """softmax(q k^T * scale) v for each sequence of the step (scale 1/sqrt(d) unless given, the scores softcapped
    when `softcap` is given); q is (T, heads, head_dim), so is the result."""
    t, heads, dim = q.shape
    kv_heads = cache.key[layer].shape[2]
    qscale = np.float32(1.0 / np.sqrt(dim) if scale is None else scale)
    starts = batch.query_starts
    if t == batch.num_sequences and bool(np.all(np.diff(starts) == 1)):
        key, value = cache.key[layer], cache.value[layer]
        y = cpu_paged.paged_decode(
            q, key, value, batch.block_tables, batch.context_lens, float(qscale), window, softcap
        )
        if y is not None:
            return y
        return _decode(q * qscale, cache, layer, batch, window, softcap).reshape(t, heads, dim)
    out = np.empty_like(q)
    for i in range(batch.num_sequences):
        s, e = int(starts[i]), int(starts[i + 1])
        if e == s:
            continue
        positions = batch.positions[s:e]  # (n,)
        lo = 0 if window is None else max(0, int(positions.min()) - window + 1)
        k, v = _gather(cache, layer, batch.block_tables[i], lo, int(batch.context_lens[i]))  # (ctx', kvh, d) each
        keys = np.arange(lo, lo + len(k))
        visible = keys[None, :] <= positions[:, None]  # (n, ctx')
        if window is not None:
            visible &= keys[None, :] > positions[:, None] - window
        out[s:e] = _attend(q[s:e] * qscale, k, v, visible, kv_heads, softcap)
    return out


def _gather(cache: KVCache, layer: int, table: np.ndarray, lo: int, ctx: int) -> tuple[np.ndarray, np.ndarray]:
    """Cache positions lo..ctx-1 of one sequence: (ctx - lo, kv_heads, head_dim) for K and for V."""
    bs = cache.block_size
    first, last = lo // bs, -(-ctx // bs)
    blocks = table[first:last]
    key, value = cache.key[layer][blocks], cache.value[layer][blocks]  # (nb, bs, kvh, d)
    a, b = lo - first * bs, ctx - first * bs
    return key.reshape(-1, *key.shape[2:])[a:b], value.reshape(-1, *value.shape[2:])[a:b]


def _attend(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, visible: np.ndarray, kv_heads: int, softcap: float | None = None
) -> np.ndarray:
    n, heads, dim = q.shape
    g = heads // kv_heads
    qg = q.reshape(n, kv_heads, g, dim).transpose(1, 2, 0, 3).reshape(kv_heads, g * n, dim)  # (kvh, G*n, d)
    scores = qg @ k.transpose(1, 2, 0)  # (kvh, G*n, d) @ (kvh, d, ctx) -> (kvh, G*n, ctx)
    scores = _softcap(scores.reshape(kv_heads, g, n, -1), softcap)  # (kvh, G, n, ctx)
    probs = _softmax(np.where(visible, scores, -np.inf))
    y = probs.reshape(kv_heads, g * n, -1) @ v.transpose(1, 0, 2)  # (kvh, G*n, ctx) @ (kvh, ctx, d)
    return y.reshape(kv_heads, g, n, dim).transpose(2, 0, 1, 3).reshape(n, heads, dim)  # (n, heads, d)


def _decode(
    q: np.ndarray, cache: KVCache, layer: int, batch: StepBatch, window: int | None, softcap: float | None = None
) -> np.ndarray:
    """One new row per sequence (the last of its context): every sequence's blocks gathered at once, (S,
    heads*head_dim) out. With a window only the blocks it can reach are gathered."""
    s, heads, dim = q.shape
    bs = cache.block_size
    ctx = batch.context_lens
    first = 0 if window is None else max(0, int(ctx.min()) - window) // bs  # blocks no sequence's window reaches
    nb = int(-(-ctx.max() // bs)) - first
    tables = np.maximum(batch.block_tables[:, first : first + nb], 0)  # -1 (unused) reads block 0, masked below
    kv_heads = cache.key[layer].shape[2]
    k = cache.key[layer][tables].reshape(s, nb * bs, kv_heads, dim)  # (S, L, kvh, d)
    v = cache.value[layer][tables].reshape(s, nb * bs, kv_heads, dim)
    g = heads // kv_heads
    qg = q.reshape(s, kv_heads, g, dim)  # (S, kvh, G, d)
    scores = _softcap(qg @ k.transpose(0, 2, 3, 1), softcap)  # (S, kvh, G, d) @ (S, kvh, d, L) -> (S, kvh, G, L)
    keys = np.arange(first * bs, (first + nb) * bs)[None, :]  # (1, L): the gathered positions
    visible = keys < ctx[:, None]  # (S, L): a decode row sees its whole context, or the window's end of it
    if window is not None:
        visible &= keys > ctx[:, None] - 1 - window
    probs = _softmax(np.where(visible[:, None, None, :], scores, -np.inf))
    y = probs @ v.transpose(0, 2, 1, 3)  # (S, kvh, G, L) @ (S, kvh, L, d) -> (S, kvh, G, d)
    return y.reshape(s, heads * dim)


def _softcap(scores: np.ndarray, softcap: float | None) -> np.ndarray:
    if softcap is None:
        return scores
    cap = np.float32(softcap)
    return np.tanh(scores / cap) * cap


def _softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x
