"""The paged KV cache's bookkeeping: which blocks of the pool belong to which sequence, and which hold a known prefix.

    manager = KVBlockManager(num_blocks, block_size, enable_prefix_caching=True)
    cached = manager.find_cached_prefix(token_ids)          # blocks already holding this prompt's first tokens
    if manager.allocate(seq_id, num_tokens, cached): ...    # the table now covers num_tokens tokens
    manager.cache_full_blocks(seq_id, token_ids, num_computed)
    manager.free(seq_id)

The arrays live in serve/zoo/decoders/step.py's KVCache; this file only hands out block numbers. Decisions (vLLM's
block manager and its automatic prefix caching are the model), and why:
- One pool of fixed-size blocks with a free list, a block table per sequence grown one block at a time: no
  sequence reserves max_model_len up front, so the pool holds as many sequences as their actual lengths allow.
- A full block is named by the hash of (its parent block's key, its token ids): the key of block i depends on every
  token before it, so equal keys mean equal prefixes and the K/V in the block are the same (position included).
  The dict keys are the tuples themselves, so a Python hash collision between different token ids cannot alias.
- Shared blocks are reference counted. A block whose count drops to 0 goes to the tail of the free list but keeps
  its key: a later request with the same prefix takes it back (a hit) until the allocator reaches it from the
  head of the list, which evicts it (least recently freed first). A sequence frees its blocks tail first, so a
  prompt's later blocks are evicted before its first ones, which more requests share.
- Only blocks whose every token has been computed are keyed (prompt and generated tokens alike: a preempted
  sequence recomputes its own blocks from the cache when they are still there); a block being written is never
  shared, so no sequence writes into a block another one reads.
- A lookup leaves at least the prompt's last token uncached: the step must run it to get the next token's logits.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["BlockKey", "KVBlockManager"]

BlockKey = tuple[int | None, tuple[int, ...]]  # (hash of the parent's key, the block's token ids)


class KVBlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need at least one block of at least one token, got {num_blocks} x {block_size}")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.enable_prefix_caching = enable_prefix_caching
        self._ref_counts = [0] * num_blocks
        self._block_keys: list[BlockKey | None] = [None] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # head: evicted first
        self._cached: dict[BlockKey, int] = {}
        self._tables: dict[int, list[int]] = {}
        self._keys: dict[int, list[BlockKey]] = {}  # per sequence: the keys of its full, computed blocks
        self.prefix_queries = 0  # prompt tokens looked up (vLLM's prefix cache queries, in tokens)
        self.prefix_hits = 0  # of which found in the cache

    @property
    def num_free_blocks(self) -> int:
        """Blocks no sequence holds (cached ones among them, which an allocation may evict)."""
        return len(self._free)

    @property
    def usage(self) -> float:
        return 1.0 - len(self._free) / self.num_blocks

    def block_table(self, seq_id: int) -> list[int]:
        return self._tables.get(seq_id, [])

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def find_cached_prefix(self, token_ids: list[int]) -> list[int]:
        """The blocks holding the longest cached run of `token_ids`' full blocks, never its last token."""
        if not self.enable_prefix_caching:
            return []
        blocks: list[int] = []
        parent: BlockKey | None = None
        for i in range((len(token_ids) - 1) // self.block_size):
            key = _key(parent, token_ids[i * self.block_size : (i + 1) * self.block_size])
            block = self._cached.get(key)
            if block is None:
                break
            blocks.append(block)
            parent = key
        return blocks

    def allocate(self, seq_id: int, num_tokens: int, cached_blocks: list[int] | None = None) -> bool:
        """Grow `seq_id`'s table to cover `num_tokens` tokens, starting a new one from `cached_blocks` (the
        prefix's hit); False, changing nothing, when the free list cannot give the blocks."""
        table = self._tables.get(seq_id)
        cached = cached_blocks or []
        if cached and table:
            raise ValueError(f"sequence {seq_id} already has blocks; a cached prefix only starts a table")
        have = len(table or ()) + len(cached)
        need = max(0, self.blocks_for(num_tokens) - have)
        revived = sum(1 for b in cached if self._ref_counts[b] == 0)  # they leave the free list when taken
        if need > len(self._free) - revived:
            return False
        if table is None:
            table = self._tables[seq_id] = []
            self._keys[seq_id] = []
        for b in cached:
            self._take_ref(b)
            table.append(b)
            self._keys[seq_id].append(self._block_keys[b])  # type: ignore[arg-type]  # a hit is keyed
        table.extend(self._pop_free() for _ in range(need))
        return True

    def record_lookup(self, num_prompt_tokens: int, num_hit_tokens: int) -> None:
        self.prefix_queries += num_prompt_tokens
        self.prefix_hits += num_hit_tokens

    def cache_full_blocks(self, seq_id: int, token_ids: list[int], num_computed: int) -> None:
        """Key `seq_id`'s blocks whose tokens are all computed, so later sequences can share them."""
        if not self.enable_prefix_caching:
            return
        keys, table = self._keys[seq_id], self._tables[seq_id]
        for i in range(len(keys), num_computed // self.block_size):
            key = _key(keys[-1] if keys else None, token_ids[i * self.block_size : (i + 1) * self.block_size])
            keys.append(key)
            if key not in self._cached:  # else another block holds the same tokens: ours stays private
                self._cached[key] = table[i]
                self._block_keys[table[i]] = key

    def free(self, seq_id: int) -> None:
        """Give `seq_id`'s blocks back, last block first (its cached blocks stay findable until evicted)."""
        for b in reversed(self._tables.pop(seq_id, [])):
            self._ref_counts[b] -= 1
            if self._ref_counts[b] == 0:
                self._free[b] = None
        self._keys.pop(seq_id, None)

    def _take_ref(self, block: int) -> None:
        if self._ref_counts[block] == 0:
            del self._free[block]
        self._ref_counts[block] += 1

    def _pop_free(self) -> int:
        block, _ = self._free.popitem(last=False)
        key = self._block_keys[block]
        if key is not None:  # evicted: the least recently freed cached block
            del self._cached[key]
            self._block_keys[block] = None
        self._ref_counts[block] = 1
        return block


def _key(parent: BlockKey | None, tokens: list[int]) -> BlockKey:
    return (None if parent is None else hash(parent), tuple(tokens))
