"""serve.backend.cpu_paged's decode attention over a paged KV cache against a float64 reference that gathers each
sequence's keys and values from its blocks: GQA groups, head dims with and without a vector tail, blocks handed
out of order, a sliding window, Gemma 2's softcap, one lane and two, each build the CPU runs."""

import numpy as np
import pytest

from serve.backend import cpu_native, cpu_paged, cpu_threads

from .conftest import BUILDS

needs_native = pytest.mark.skipif(not BUILDS, reason="no native kernel build for this CPU")


def make_case(seed, seqs, heads, kv_heads, dim, bs=4, lens=None):
    rng = np.random.default_rng(seed)
    lens = np.asarray(lens if lens is not None else rng.integers(1, 30, seqs), np.int64)
    per_seq = -(-int(lens.max()) // bs) + 1
    num_blocks = seqs * per_seq + 3
    key = rng.standard_normal((num_blocks, bs, kv_heads, dim)).astype(np.float32)
    value = rng.standard_normal((num_blocks, bs, kv_heads, dim)).astype(np.float32)
    tables = np.full((seqs, per_seq), -1, np.int32)
    order = rng.permutation(num_blocks)[: seqs * per_seq].reshape(seqs, per_seq)
    for s, n in enumerate(lens):
        used = -(-int(n) // bs)
        tables[s, :used] = order[s, :used]
    q = rng.standard_normal((seqs, heads, dim)).astype(np.float32)
    return q, key, value, tables, lens


def reference(q, key, value, tables, lens, scale, window=None, softcap=None):
    seqs, heads, dim = q.shape
    bs, kv_heads = key.shape[1], key.shape[2]
    out = np.zeros((seqs, heads, dim))
    for s, n in enumerate(lens):
        lo = 0 if window is None else max(0, int(n) - window)
        pos = np.arange(lo, int(n))
        slots = tables[s, pos // bs], pos % bs
        k, v = key[slots].astype(np.float64), value[slots].astype(np.float64)  # (L, kvh, d)
        for h in range(heads):
            g = h // (heads // kv_heads)
            x = k[:, g] @ q[s, h].astype(np.float64) * scale
            if softcap is not None:
                x = softcap * np.tanh(x / softcap)
            p = np.exp(x - x.max())
            out[s, h] = (p / p.sum()) @ v[:, g]
    return out


@needs_native
@pytest.mark.parametrize(
    ("seqs", "heads", "kv_heads", "dim", "window", "softcap"),
    [(5, 4, 4, 64, None, None), (16, 8, 2, 40, None, None), (3, 6, 1, 16, 7, None), (4, 8, 4, 72, 5, 3.0),
     (1, 2, 2, 128, None, None)],
)  # fmt: skip
def test_matches_a_gathered_reference(build, seqs, heads, kv_heads, dim, window, softcap):
    q, key, value, tables, lens = make_case(seqs + dim, seqs, heads, kv_heads, dim)
    scale = dim**-0.5
    out = cpu_paged.paged_decode(q, key, value, tables, lens, scale, window, softcap)
    assert out is not None and out.shape == q.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, reference(q, key, value, tables, lens, scale, window, softcap), atol=2e-6)


@needs_native
def test_two_lanes_give_the_one_lane_answer(build):
    q, key, value, tables, lens = make_case(3, 32, 12, 12, 64, bs=16, lens=np.arange(100, 132))
    split = cpu_paged.paged_decode(q, key, value, tables, lens, 0.125)  # enough work to split across lanes
    previous = cpu_threads.get_num_threads()
    cpu_threads.set_num_threads(1)
    try:
        whole = cpu_paged.paged_decode(q, key, value, tables, lens, 0.125)
    finally:
        cpu_threads.set_num_threads(previous)
    np.testing.assert_array_equal(split, whole)


@needs_native
def test_a_table_too_short_for_the_context_is_refused(build):
    q, key, value, tables, lens = make_case(1, 2, 2, 2, 8, lens=[8, 8])
    with pytest.raises(ValueError, match="needs more blocks"):
        cpu_paged.paged_decode(q, key, value, tables[:, :1], lens, 1.0)


def test_none_where_the_kernel_does_not_apply(monkeypatch):
    q, key, value, tables, lens = make_case(2, 2, 3, 2, 8)
    assert cpu_paged.paged_decode(q, key, value, tables, lens, 1.0) is None  # 3 heads over 2 KV heads
    q, key, value, tables, lens = make_case(2, 2, 2, 2, 8)
    assert cpu_paged.paged_decode(q, key.astype(np.float64), value, tables, lens, 1.0) is None
    monkeypatch.setattr(cpu_native, "_lib", None)
    assert cpu_paged.paged_decode(q, key, value, tables, lens, 1.0) is None
