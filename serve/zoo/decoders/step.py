"""What one engine step hands a decoder: the new tokens of every running sequence as one ragged batch, and the
paged KV cache those tokens attend to and write into.

The contract between the engine (serve/generation: it owns which blocks belong to which sequence) and the decoder
families (serve/zoo/decoders: they own the arithmetic). Decisions, and why:
- One ragged batch per step, no padding: sequence i's new tokens are `input_ids[query_starts[i]:query_starts[i+1]]`.
  A prefill chunk of 200 tokens and 15 decodes of one token each are 215 rows of every product (vLLM's flattened
  batch), so the products are as large as the step allows and nothing is computed for padding.
- The cache is paged: a pool of fixed-size blocks per layer, `(num_blocks, block_size, num_kv_heads, head_dim)`,
  and a block table per sequence. Sequences grow block by block from one pool sized by a byte budget, so no
  sequence reserves `max_model_len` up front and blocks of an identical prompt prefix can be shared.
- Each new token's K and V go to `slot_mapping[t] = block * block_size + offset` before attention runs, so
  attention of a step reads one place (the cache) for the earlier tokens and the new ones alike.
- Logits only where a token is sampled (`logits_indices`): the last new token of each sequence whose prompt is
  whole; a chunk in the middle of a prompt needs none, and the vocabulary product is the largest of the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = ["Decoder", "DecoderSpec", "KVCache", "StepBatch"]


@dataclass(frozen=True)
class StepBatch:
    input_ids: np.ndarray  # (T,) int64: the new tokens of every sequence of the step, sequence after sequence
    positions: np.ndarray  # (T,) int64: each new token's position in its sequence (0 for a prompt's first token)
    query_starts: np.ndarray  # (S+1,) int64: sequence i's new tokens are rows query_starts[i]:query_starts[i+1]
    context_lens: np.ndarray  # (S,) int64: tokens of sequence i in the cache once this step's are written
    block_tables: np.ndarray  # (S, max_blocks) int32: sequence i's blocks in order; unused entries are -1
    slot_mapping: np.ndarray  # (T,) int64: where token t's K and V go: block * block_size + offset in the block
    logits_indices: np.ndarray  # (L,) int64: the rows whose next-token logits the step returns, in this order

    @property
    def num_sequences(self) -> int:
        return len(self.context_lens)


@dataclass(frozen=True)
class DecoderSpec:
    """What the engine needs to know of a decoder to size its cache and bound its sequences."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    dtype: np.dtype  # the cache's element type (the decoder's activation type)
    prefix_caching: bool = True  # False: a cached K depends on more than its tokens (dynamic RoPE)


class KVCache:
    """The K and V blocks of every layer: `key[layer]` and `value[layer]` are (num_blocks, block_size,
    num_kv_heads, head_dim). The engine makes it once, from a byte budget; the decoder writes and reads it."""

    def __init__(self, spec: DecoderSpec, num_blocks: int, block_size: int) -> None:
        shape = (num_blocks, block_size, spec.num_kv_heads, spec.head_dim)
        self.num_blocks, self.block_size = num_blocks, block_size
        self.key = [np.zeros(shape, spec.dtype) for _ in range(spec.num_layers)]
        self.value = [np.zeros(shape, spec.dtype) for _ in range(spec.num_layers)]

    @staticmethod
    def bytes_per_block(spec: DecoderSpec, block_size: int) -> int:
        return 2 * spec.num_layers * block_size * spec.num_kv_heads * spec.head_dim * np.dtype(spec.dtype).itemsize

    def write(self, layer: int, key: np.ndarray, value: np.ndarray, slot_mapping: np.ndarray) -> None:
        """Store the step's new K and V, (T, num_kv_heads, head_dim) each, at their slots."""
        block, offset = np.divmod(slot_mapping, self.block_size)
        self.key[layer][block, offset] = key
        self.value[layer][block, offset] = value


class Decoder(Protocol):
    """A decoder family's model as the engine drives it (serve/zoo/decoders implements it for each family)."""

    spec: DecoderSpec

    def step(self, batch: StepBatch, cache: KVCache) -> np.ndarray:
        """Run the step's new tokens through the model, writing their K and V into `cache`; return the float32
        logits of the rows `batch.logits_indices`, (L, vocab_size)."""
        ...
