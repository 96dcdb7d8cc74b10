"""The scheduled sequences of one step -> the decoder's ragged StepBatch (serve/zoo/decoders/step.py).

Sequence i runs its tokens `token_ids[num_computed : num_computed + n]`; each one's K and V go to the slot its
position names in the sequence's block table, and the step asks for logits only at the last row of the sequences
whose every token is then computed (the others are prefill chunks mid-prompt: nothing to sample).
"""

from __future__ import annotations

import numpy as np

from serve.generation.sequence import Sequence
from serve.zoo.decoders.step import StepBatch

__all__ = ["build_step_batch"]


def build_step_batch(scheduled: list[tuple[Sequence, int]], tables: list[list[int]],
                     block_size: int) -> tuple[StepBatch, list[int]]:  # fmt: skip
    """The batch, and the indices (into `scheduled`) of the sequences whose logits it returns, in order."""
    ids, positions, slots, starts, context, logits_rows, sampled = [], [], [], [0], [], [], []
    for i, ((seq, n), table) in enumerate(zip(scheduled, tables)):
        begin, end = seq.num_computed, seq.num_computed + n
        pos = np.arange(begin, end, dtype=np.int64)  # (n,)
        ids.append(np.asarray(seq.token_ids[begin:end], np.int64))
        positions.append(pos)
        slots.append(np.asarray(table, np.int64)[pos // block_size] * block_size + pos % block_size)
        starts.append(starts[-1] + n)
        context.append(end)
        if end == seq.num_tokens:
            logits_rows.append(starts[-1] - 1)
            sampled.append(i)
    width = max(len(t) for t in tables)
    block_tables = np.full((len(tables), width), -1, np.int32)  # (S, max_blocks)
    for i, t in enumerate(tables):
        block_tables[i, : len(t)] = t
    batch = StepBatch(
        input_ids=np.concatenate(ids),
        positions=np.concatenate(positions),
        query_starts=np.asarray(starts, np.int64),
        context_lens=np.asarray(context, np.int64),
        block_tables=block_tables,
        slot_mapping=np.concatenate(slots),
        logits_indices=np.asarray(logits_rows, np.int64),
    )
    return batch, sampled
