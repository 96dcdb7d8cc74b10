"""Which sequences run in the next step, and how many of their tokens: continuous (iteration-level) batching.

    out = scheduler.schedule()      # out.scheduled: [(sequence, number of its tokens to run)], out.batch
    ... decoder step ...
    scheduler.after_step(out)       # their tokens are computed now

Decisions (vLLM's v1 scheduler is the model), and why:
- One rule for every kind of work: a sequence runs `token_ids[num_computed:]`, as much of it as the step's token
  budget (`max_num_batched_tokens`) leaves. A decode is 1 token, a prompt is a prefill, a prompt longer than the
  budget is prefilled in chunks over several steps beside the other sequences' decodes, and a preempted sequence
  is recomputed (prompt + what it generated) the same way. No separate prefill and decode phases.
- Running sequences first, oldest first, so what is started finishes; then waiting ones FCFS while there are seats
  (`max_num_seqs`), budget and blocks. A waiting request whose prompt prefix is cached starts after the cached
  tokens.
- Whole prompts first: once a step has admitted one waiting prompt, the next is admitted only if all of its tokens
  fit what is left of the budget (else it waits for the next step, at the head of the queue). A chunk of it would
  cost this step's time, which every prompt admitted in it waits for, and still give its first token no earlier.
  The queue's head is always admitted, chunked when it needs more than the budget: a prompt longer than
  `max_num_batched_tokens` is prefilled in chunks as vLLM does, and nothing waits forever.
- Pacing a burst (serve's own `prefill_step_cost`, off unless set; vLLM has no such setting): a step's time is
  about a fixed cost (reading every weight once, ~`prefill_step_cost` prompt tokens' compute) plus its tokens, and
  every prompt admitted in a step gets its first token when the step ends. N prompts arriving together all wait for
  the one large step under plain FCFS; started in groups, the first groups get theirs after a fraction of it. The
  mean time to first token of W waiting prompt tokens is least for groups of about sqrt(cost * W) tokens, so a
  step admits new prompts up to that many tokens (computed when the burst is larger than the budget alone, from
  max(W, max_num_batched_tokens), so groups do not shrink as the queue drains). The price: the last prompt's
  first token comes a few fixed costs later (p99), and the decodes of the started ones ride in the later steps.
- When the pool cannot give a running sequence the blocks for its next tokens, the newest running sequence is
  preempted: its blocks are freed and it goes to the front of the waiting queue, to be recomputed when blocks
  come back. Nothing fails for lack of blocks; the oldest sequences keep their progress. No one is admitted in a
  step that preempted (the blocks are scarce).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from serve.generation.block_manager import KVBlockManager
from serve.generation.sequence import Sequence
from serve.generation.step_batch import build_step_batch
from serve.zoo.decoders.step import StepBatch

__all__ = ["Scheduler", "SchedulerOutput"]


@dataclass
class SchedulerOutput:
    scheduled: list[tuple[Sequence, int]] = field(default_factory=list)  # (sequence, tokens it runs this step)
    preempted: list[Sequence] = field(default_factory=list)
    batch: StepBatch | None = None  # None when nothing runs
    sampled: list[int] = field(default_factory=list)  # indices into `scheduled` whose logits the step returns


class Scheduler:
    def __init__(
        self, blocks: KVBlockManager, max_num_seqs: int, max_num_batched_tokens: int,
        prefill_step_cost: int | None = None,
    ) -> None:  # fmt: skip
        self.blocks = blocks
        self.max_num_seqs, self.max_num_batched_tokens = max_num_seqs, max_num_batched_tokens
        self.prefill_step_cost = prefill_step_cost  # None: every waiting prompt the budget holds starts at once
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in admission order: the last is the newest
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def remove(self, seq: Sequence) -> None:
        """Take a finished or aborted sequence out, giving its blocks back."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.blocks.free(seq.seq_id)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self._schedule_running(out, self.max_num_batched_tokens)
        if not out.preempted:
            self._schedule_waiting(out, budget)
        if out.scheduled:
            tables = [self.blocks.block_table(seq.seq_id) for seq, _ in out.scheduled]
            out.batch, out.sampled = build_step_batch(out.scheduled, tables, self.blocks.block_size)
        return out

    def after_step(self, out: SchedulerOutput) -> None:
        """The scheduled tokens' K and V are in the cache now: count them, and key the blocks they filled."""
        for seq, n in out.scheduled:
            seq.num_computed += n
            self.blocks.cache_full_blocks(seq.seq_id, seq.token_ids, seq.num_computed)

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_tokens - seq.num_computed, budget)
            while not self.blocks.allocate(seq.seq_id, seq.num_computed + n):
                victim = self.running[-1]
                self._preempt(victim, out)
                if victim is seq:
                    return budget
            out.scheduled.append((seq, n))
            budget -= n
            i += 1
        return budget

    def _prefill_group(self) -> int | None:
        """The new prompts' tokens this step may admit when pacing a burst (module docstring), else None."""
        if self.prefill_step_cost is None or not self.waiting:
            return None
        waiting = sum(seq.num_tokens for seq in self.waiting)
        return math.isqrt(self.prefill_step_cost * max(waiting, self.max_num_batched_tokens))

    def _schedule_waiting(self, out: SchedulerOutput, budget: int) -> None:
        group, admitted = self._prefill_group(), 0
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            cached = self.blocks.find_cached_prefix(seq.token_ids)
            num_cached = len(cached) * self.blocks.block_size
            need = seq.num_tokens - num_cached
            if admitted and need > min(budget, budget if group is None else group - admitted):
                return  # whole prompts after the first; the group's tokens when pacing a burst
            n = min(need, budget)
            if not self.blocks.allocate(seq.seq_id, num_cached + n, cached):
                return
            self.blocks.record_lookup(seq.num_tokens, num_cached)
            if not seq.num_preemptions:
                seq.num_cached_tokens = num_cached
            seq.num_computed = num_cached
            self.waiting.popleft()
            self.running.append(seq)
            out.scheduled.append((seq, n))
            budget -= n
            admitted += n

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        self.running.remove(seq)
        self.blocks.free(seq.seq_id)
        seq.num_computed = 0
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)
        out.preempted.append(seq)
