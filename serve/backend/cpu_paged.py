"""Decode attention over a paged KV cache on the CPU: one native call (serve_kernels' sk_paged.c) for every
sequence of a decode step, reading keys and values in place in the cache's blocks.

Why: the numpy path gathers each layer's K and V of every sequence into new (S, L, kv_heads, head_dim) arrays
(`cache.key[layer][tables]`), pads them to the longest sequence and runs two batched products and a masked
softmax over the padding: at 16 sequences of GPT-2 small that was 15-17 ms of a decode step (10-13%). The kernel
reads each key and value row once per KV head group where it lies, the group's query heads sharing it, and never
materialises scores beyond one (sequence, KV head) pair.

`paged_decode` returns None where the kernel does not apply (no native build, not float32, a head count that KV
heads do not divide): the caller then runs the numpy path. Lanes (cpu_threads) split the (sequence, KV head)
pairs when the step has enough of them to pay for the hand-off.
"""

from __future__ import annotations

import numpy as np

from serve.backend import cpu_native, cpu_threads

__all__ = ["paged_decode"]

_SPLIT_FLOPS = 1 << 21  # below this, one lane: the hand-off (~70 us) costs more than the second core gains


def paged_decode(
    q: np.ndarray,
    key_cache: np.ndarray,
    value_cache: np.ndarray,
    block_tables: np.ndarray,
    context_lens: np.ndarray,
    scale: float,
    window: int | None = None,
    softcap: float | None = None,
) -> np.ndarray | None:
    """softmax(cap(q . k * scale)) v for one query row per sequence: q (S, heads, head_dim); caches (num_blocks,
    block_size, kv_heads, head_dim); sequence s sees keys max(0, ctx_s - window) <= j < ctx_s = context_lens[s],
    key j in block block_tables[s, j // block_size]. cap(x) = softcap * tanh(x / softcap) when softcap is given.
    Returns (S, heads, head_dim), or None where the kernel does not apply."""
    fn = cpu_native.paged_decode_kernel()
    if fn is None or q.ndim != 3 or key_cache.ndim != 4 or key_cache.shape != value_cache.shape:
        return None
    if any(a.dtype != np.float32 or not a.flags.c_contiguous for a in (key_cache, value_cache)):
        return None
    s, heads, dim = q.shape
    _, bs, kv_heads, kdim = key_cache.shape
    if kdim != dim or kv_heads == 0 or heads % kv_heads or len(context_lens) != s or block_tables.shape[0] != s:
        return None
    q = np.ascontiguousarray(q, np.float32)
    tables = np.ascontiguousarray(block_tables, np.int32)  # (S, max_blocks)
    ctx = np.ascontiguousarray(context_lens, np.int64)  # (S,)
    if s and int(ctx.max()) > tables.shape[1] * bs:
        raise ValueError(f"paged_decode: a context of {int(ctx.max())} tokens needs more blocks than the table has")
    out = np.empty_like(q)  # (S, heads, head_dim)
    caches = (key_cache.ctypes.data, value_cache.ctypes.data, tables.ctypes.data, tables.shape[1], ctx.ctypes.data)
    args = (*caches, out.ctypes.data, heads, kv_heads, dim, bs, float(scale), float(softcap or 0.0), int(window or 0))

    def part(i0: int, i1: int) -> None:
        if fn(q.ctypes.data, *args, i0, i1):
            raise MemoryError("paged_decode: out of memory for the scores")

    pairs = s * kv_heads
    flops = 4 * heads * dim * int(ctx.sum())
    cpu_threads.parallel(part, [(0, pairs)] if flops < _SPLIT_FLOPS else cpu_threads.spans(pairs))
    return out
