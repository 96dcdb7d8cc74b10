"""One generated sequence's state inside the engine (`Sequence`), and what a step reports of it (`RequestOutput`).

A request with `n` > 1 is `n` sequences with the same request id and indices 0..n-1. The state the scheduler reads
is two numbers over one token list: `token_ids` (prompt + what was generated so far) and `num_computed` (how many
of them have their K and V in the cache). A prefill chunk, a decode, and the recompute after a preemption are all
"run tokens[num_computed:num_computed + k]"; a sequence gets a new token when the step runs its last token.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from serve.generation.detokenizer import IncrementalDetokenizer
from serve.generation.sampling_params import SamplingParams

__all__ = ["RequestMetrics", "RequestOutput", "Sequence"]

_ids = itertools.count()


class Sequence:
    def __init__(self, request_id: str, index: int, prompt_token_ids: list[int], params: SamplingParams,
                 max_tokens: int, rng: np.random.Generator, detokenizer: IncrementalDetokenizer,
                 deadline: float | None, arrival: float) -> None:  # fmt: skip
        self.seq_id = next(_ids)
        self.request_id, self.index = request_id, index
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.num_computed = 0
        self.params, self.max_tokens, self.rng = params, max_tokens, rng
        self.detokenizer = detokenizer
        self.deadline, self.arrival = deadline, arrival
        self.finish_reason: str | None = None
        self.num_preemptions = 0
        self.num_cached_tokens = 0  # prompt tokens found in the prefix cache at its first admission
        self.first_scheduled: float | None = None
        self.first_token: float | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.token_ids[: self.num_prompt_tokens]


@dataclass
class RequestOutput:
    """What one step produced for one sequence of a request (only sequences that got a token or finished)."""

    request_id: str
    index: int  # which of the request's n sequences
    new_token_ids: list[int]
    new_text: str
    finished: bool
    finish_reason: str | None  # "stop" | "length" | "abort" once finished
    prompt_tokens: int
    completion_tokens: int
    # per new token: {"token", "token_id", "logprob", "top_logprobs": [{"token", "token_id", "logprob"}]}
    logprobs: list[dict[str, Any]] | None = None
    error: BaseException | None = field(default=None)  # set when this sequence failed (finish_reason "abort")
    metrics: RequestMetrics | None = None  # on the finished output


@dataclass(frozen=True)
class RequestMetrics:
    """When things happened to a sequence (the engine's clock, time.monotonic), for vLLM's latency histograms:
    queue time = first_scheduled - arrival, time to first token = first_token - arrival, end to end = finished -
    arrival, decode time = finished - first_token. None: it never got that far (aborted before)."""

    arrival: float
    first_scheduled: float | None
    first_token: float | None
    finished: float
    num_cached_tokens: int
    num_preemptions: int
