"""The engine's limits, one typed object: `EngineConfig` (vLLM's names, so its users' settings carry over).

The KV cache is sized by bytes, not by a number of sequences: `num_blocks = kv_cache_bytes // bytes_per_block`,
fixed at start, so the engine's memory is known before the first request and never grows. The pool must hold at
least one sequence of `max_model_len` tokens, else a long request could be preempted forever; that is refused at
start with the numbers to change.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EngineConfig"]


@dataclass(frozen=True)
class EngineConfig:
    max_model_len: int | None = None  # prompt + generated tokens of one sequence; None: the model's positions
    max_num_seqs: int = 64  # sequences running (holding KV blocks) at once
    max_num_batched_tokens: int = 512  # tokens of one step, prefill chunks and decodes together
    block_size: int = 16  # tokens per KV block
    kv_cache_bytes: int = 256 * 2**20  # the KV pool's byte budget (all layers, K and V)
    enable_prefix_caching: bool = True
    max_waiting: int = 1024  # requests queued beyond the running ones; more are refused (QueueFull)
    prefill_step_cost: int | None = None  # serve's own: pace a burst of prompts (scheduler.py); None: vLLM's FCFS

    def validate(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "kv_cache_bytes", "max_waiting"):
            if getattr(self, name) < 1:
                raise ValueError(f"EngineConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.prefill_step_cost is not None and self.prefill_step_cost < 1:
            raise ValueError(f"EngineConfig.prefill_step_cost must be >= 1 (or unset), got {self.prefill_step_cost}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"EngineConfig.max_model_len must be >= 2, got {self.max_model_len}")
