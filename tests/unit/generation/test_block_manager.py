"""KVBlockManager: tables grow block by block, a refused allocation changes nothing, prefix blocks are shared by
reference count and found by their hash chain, and freed cached blocks are evicted least recently freed first."""

from __future__ import annotations

import pytest

from serve.generation.block_manager import KVBlockManager

BS = 4


def test_tables_grow_by_blocks_and_a_refused_allocation_changes_nothing() -> None:
    m = KVBlockManager(5, BS)
    assert m.allocate(1, 5) and len(m.block_table(1)) == 2
    assert m.allocate(1, 8) and len(m.block_table(1)) == 2  # still fits
    assert m.allocate(1, 9) and len(m.block_table(1)) == 3
    assert not m.allocate(2, 12)  # needs 3, 2 free
    assert m.block_table(2) == [] and m.num_free_blocks == 2
    assert m.usage == pytest.approx(3 / 5)
    m.free(1)
    assert m.num_free_blocks == 5 and m.allocate(2, 12)


def test_a_shared_prefix_is_found_by_its_hash_chain_and_shared_by_reference_count() -> None:
    m = KVBlockManager(8, BS)
    tokens = list(range(1, 11))  # 2 full blocks + 2 tokens
    assert m.allocate(1, len(tokens))
    m.cache_full_blocks(1, tokens, num_computed=10)
    hit = m.find_cached_prefix(tokens + [99])
    assert hit == m.block_table(1)[:2]
    assert m.find_cached_prefix([1, 2, 3, 4, 0, 0, 0, 0, 9]) == hit[:1]  # second block differs
    assert m.find_cached_prefix([0] + tokens) == []  # same blocks shifted: a different chain
    assert m.find_cached_prefix(tokens[:8]) == hit[:1]  # the last token is never cached
    assert m.allocate(2, 11, hit) and m.block_table(2)[:2] == hit
    m.free(1)
    assert m.num_free_blocks == 8 - 2 - 1  # the shared two are still held by sequence 2
    m.free(2)
    assert m.num_free_blocks == 8 and m.find_cached_prefix(tokens + [99]) == hit  # freed, still cached


def test_freed_cached_blocks_are_evicted_least_recently_freed_first() -> None:
    m = KVBlockManager(4, BS)
    a, b = list(range(1, 9)), list(range(11, 19))
    for seq, tokens in ((1, a), (2, b)):
        assert m.allocate(seq, 8)
        m.cache_full_blocks(seq, tokens, 8)
    m.free(1)  # a's blocks go to the free list first...
    m.free(2)  # ...then b's
    assert m.allocate(3, 8)  # takes two blocks: a's, the least recently freed
    assert m.find_cached_prefix(a + [0]) == [] and len(m.find_cached_prefix(b + [0])) == 2
    # a hit takes its blocks out of the free list, so an allocation cannot evict them under it
    hit = m.find_cached_prefix(b + [0])
    assert m.allocate(4, 12, hit) is False  # 2 cached + 1 new, but only the 2 cached ones are free
    assert m.find_cached_prefix(b + [0]) == hit and m.num_free_blocks == 2
