"""The generative engine: requests in, a stream of tokens and text out, one decoder step at a time.

    engine = LLMEngine(decoder, tokenizer, EngineConfig(max_model_len=2048, kv_cache_bytes=2**30))
    engine.add_request("r1", prompt_token_ids, SamplingParams(max_tokens=64))
    while engine.has_unfinished():
        for out in engine.step(): ...   # RequestOutput: new tokens and text of a sequence, finish_reason at the end

Decisions (vLLM's LLMEngine is the model), and why:
- `add_request` checks everything it can at once (prompt + max_tokens within max_model_len, sampling fields, the
  queue bound) and raises ValueError / QueueFull with the numbers, so a request the engine cannot serve is refused
  before it waits. Requests and aborts arrive from other threads (the async engine's event loop) into a pending
  list under a small lock; only `step()` touches the scheduler, so a step never holds the lock while it computes.
- One step: drop what was aborted or is past its deadline (finish "abort", blocks freed), schedule, run the
  decoder once on the ragged batch, sample the sequences whose tokens are all computed, detokenize and check
  their stops. A decoder exception fails the sequences of that step (their outputs carry the error) and the engine
  goes on with the others; a sampling exception fails its own request only.
- A finish: EOS (unless ignore_eos) or a stop token id -> "stop", with the token counted but not decoded; a stop
  string -> "stop", the text cut before it; max_tokens or max_model_len reached -> "length".
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

import numpy as np

from serve.errors import QueueFull
from serve.generation.block_manager import KVBlockManager
from serve.generation.config import EngineConfig
from serve.generation.detokenizer import IncrementalDetokenizer, TokenDecoder
from serve.generation.sampler import Sampled, sample
from serve.generation.sampling_params import SamplingParams
from serve.generation.scheduler import Scheduler, SchedulerOutput
from serve.generation.sequence import RequestMetrics, RequestOutput, Sequence
from serve.zoo.decoders.step import Decoder, KVCache

__all__ = ["LLMEngine"]


class EngineTokenizer(TokenDecoder, Protocol):
    eos_token_ids: frozenset[int]

    def id_to_token(self, token_id: int) -> str: ...


class LLMEngine:
    def __init__(self, decoder: Decoder, tokenizer: EngineTokenizer, config: EngineConfig | None = None) -> None:
        config = config or EngineConfig()
        config.validate()
        spec = decoder.spec
        self.decoder, self.tokenizer, self.config = decoder, tokenizer, config
        self.max_model_len = config.max_model_len or spec.max_position_embeddings
        if self.max_model_len > spec.max_position_embeddings:
            raise ValueError(f"max_model_len {self.max_model_len} is beyond the model's max_position_embeddings "
                             f"{spec.max_position_embeddings}; lower max_model_len")  # fmt: skip
        per_block = KVCache.bytes_per_block(spec, config.block_size)
        num_blocks = config.kv_cache_bytes // per_block
        need = -(-self.max_model_len // config.block_size)
        if num_blocks < need:
            raise ValueError(f"kv_cache_bytes {config.kv_cache_bytes} holds {num_blocks} blocks of {per_block} bytes; "
                             f"one sequence of max_model_len {self.max_model_len} needs {need}: raise kv_cache_bytes "
                             f"to at least {need * per_block} or lower max_model_len")  # fmt: skip
        self.cache = KVCache(spec, num_blocks, config.block_size)
        prefix_caching = config.enable_prefix_caching and spec.prefix_caching  # off where K depends on the length
        self.blocks = KVBlockManager(num_blocks, config.block_size, prefix_caching)
        self.scheduler = Scheduler(self.blocks, config.max_num_seqs, config.max_num_batched_tokens,
                                   config.prefill_step_cost)  # fmt: skip
        self._lock = threading.Lock()
        self._pending: list[Sequence] = []
        self._aborts: set[str] = set()
        self._requests: dict[str, list[Sequence]] = {}  # every unfinished request's sequences (step thread only)
        self._num_queued = 0  # pending + waiting, for the queue bound (under the lock)
        self.clock = time.monotonic  # what deadlines are read against
        self.counters = {"preemptions": 0, "prompt_tokens": 0, "generation_tokens": 0, "tokens_processed": 0,
                         "steps": 0, "step_errors": 0}  # fmt: skip

    # ---- what other threads call ----

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                    deadline: float | None = None) -> None:  # fmt: skip
        """Queue a request; `deadline` is a time.monotonic() value after which it finishes with "abort"."""
        params.validate()
        prompt = [int(t) for t in prompt_token_ids]
        if not prompt:
            raise ValueError("the prompt is empty: send at least one token")
        vocab = self.decoder.spec.vocab_size
        if min(prompt) < 0 or max(prompt) >= vocab:
            raise ValueError(f"prompt token ids must be in [0, {vocab}), got {min(prompt)}..{max(prompt)}")
        max_tokens = params.max_tokens if params.max_tokens is not None else self.max_model_len - len(prompt)
        if len(prompt) + max_tokens > self.max_model_len or max_tokens < 1:
            raise ValueError(f"the prompt has {len(prompt)} tokens and max_tokens is {max_tokens}: "
                             f"{len(prompt) + max_tokens} is more than max_model_len {self.max_model_len}; "
                             "shorten the prompt or lower max_tokens")  # fmt: skip
        seqs = [self._sequence(request_id, i, prompt, params, max_tokens, deadline) for i in range(params.n)]
        with self._lock:
            if request_id in self._requests or any(s.request_id == request_id for s in self._pending):
                raise ValueError(f"request id {request_id!r} is already in use")
            if self._num_queued + params.n > self.config.max_waiting:
                raise QueueFull(f"{self._num_queued} requests are waiting (max_waiting {self.config.max_waiting}); "
                                "retry later")  # fmt: skip
            self._pending.extend(seqs)
            self._num_queued += params.n

    def abort(self, request_id: str) -> None:
        """Finish the request with "abort" at the next step, freeing its blocks (unknown ids are ignored)."""
        with self._lock:
            self._aborts.add(request_id)

    def has_unfinished(self) -> bool:
        with self._lock:
            return bool(self._pending or self._requests)

    def stats(self) -> dict[str, Any]:
        return {"running": len(self.scheduler.running), "waiting": len(self.scheduler.waiting) + len(self._pending),
                "kv_cache_usage": self.blocks.usage, "num_blocks": self.blocks.num_blocks,
                "num_preemptions": self.scheduler.num_preemptions, "prefix_cache_queries": self.blocks.prefix_queries,
                "prefix_cache_hits": self.blocks.prefix_hits, **self.counters}  # fmt: skip

    # ---- the step ----

    def step(self) -> list[RequestOutput]:
        outputs = self._take_arrivals()
        sched = self.scheduler.schedule()
        with self._lock:
            self._num_queued = len(self.scheduler.waiting) + len(self._pending)
        if sched.batch is None:
            return outputs
        self.counters["steps"] += 1
        now = self.clock()
        for seq, _ in sched.scheduled:
            if seq.first_scheduled is None:
                seq.first_scheduled = now
        try:
            logits = self.decoder.step(sched.batch, self.cache)  # (L, vocab)
        except Exception as e:  # the model failed: this step's sequences fail, the engine goes on
            self.counters["step_errors"] += 1
            for seq, _ in sched.scheduled:
                outputs.append(self._finish(seq, "abort", [], error=e))
            return outputs
        self.scheduler.after_step(sched)
        self.counters["tokens_processed"] += int(sched.batch.input_ids.shape[0])
        outputs += self._sample(sched, logits)
        return outputs

    def _take_arrivals(self) -> list[RequestOutput]:
        with self._lock:
            pending, self._pending = self._pending, []
            aborts, self._aborts = self._aborts, set()
        for seq in pending:
            self._requests.setdefault(seq.request_id, []).append(seq)
            self.scheduler.add(seq)
            self.counters["prompt_tokens"] += seq.num_prompt_tokens
        now = self.clock()
        outputs = []
        for rid, seqs in list(self._requests.items()):
            for seq in list(seqs):
                if rid in aborts or (seq.deadline is not None and now >= seq.deadline):
                    outputs.append(self._finish(seq, "abort", []))
        return outputs

    def _sample(self, sched: SchedulerOutput, logits: np.ndarray) -> list[RequestOutput]:
        seqs = [sched.scheduled[i][0] for i in sched.sampled]
        results = sample(logits, seqs, self.tokenizer.eos_token_ids)
        outputs = []
        for seq, result in zip(seqs, results):
            if isinstance(result, Exception):
                outputs.append(self._finish(seq, "abort", [], error=result))
                continue
            try:
                outputs.append(self._append(seq, result))
            except Exception as e:  # e.g. the tokenizer failed on this token: this request only
                outputs.append(self._finish(seq, "abort", [], error=e))
        return outputs

    def _append(self, seq: Sequence, result: Sampled) -> RequestOutput:
        token = result.token_id
        seq.token_ids.append(token)
        if seq.first_token is None:
            seq.first_token = self.clock()
        self.counters["generation_tokens"] += 1
        params, detok = seq.params, seq.detokenizer
        reason = None
        eos = token in self.tokenizer.eos_token_ids and not params.ignore_eos
        if eos or token in params.stop_token_ids:
            reason = "stop"
        else:
            before = len(detok.text)
            detok.add(token)
            if seq.num_output_tokens >= params.min_tokens and detok.check_stop(len(detok.text) - before):
                reason = "stop"
        if reason is None and (seq.num_output_tokens >= seq.max_tokens or seq.num_tokens >= self.max_model_len):
            reason = "length"
        logprobs = self._logprobs(token, result) if result.logprob is not None else None
        if reason is not None:
            return self._finish(seq, reason, [token], logprobs)
        return self._output(seq, [token], detok.take(final=False), False, None, logprobs)

    def _finish(self, seq: Sequence, reason: str, new_tokens: list[int], logprobs: list[dict[str, Any]] | None = None,
                error: BaseException | None = None) -> RequestOutput:  # fmt: skip
        self.scheduler.remove(seq)
        seqs = self._requests.get(seq.request_id, [])
        if seq in seqs:
            seqs.remove(seq)
        if not seqs:
            self._requests.pop(seq.request_id, None)
        try:
            text = seq.detokenizer.take(final=True) if error is None else ""
        except Exception as e:
            text, error = "", e
        out = self._output(seq, new_tokens, text, True, reason, logprobs, error)
        out.metrics = RequestMetrics(seq.arrival, seq.first_scheduled, seq.first_token, self.clock(),
                                     seq.num_cached_tokens, seq.num_preemptions)  # fmt: skip
        return out

    def _output(self, seq: Sequence, new_tokens: list[int], text: str, finished: bool, reason: str | None,
                logprobs: list[dict[str, Any]] | None, error: BaseException | None = None,
                ) -> RequestOutput:  # fmt: skip
        return RequestOutput(seq.request_id, seq.index, new_tokens, text, finished, reason, seq.num_prompt_tokens,
                             seq.num_output_tokens, logprobs, error)  # fmt: skip

    def _logprobs(self, token: int, result: Sampled) -> list[dict[str, Any]]:
        name = self.tokenizer.id_to_token
        top = [{"token": name(t), "token_id": t, "logprob": lp} for t, lp in result.top_logprobs or ()]
        return [{"token": name(token), "token_id": token, "logprob": result.logprob, "top_logprobs": top}]

    def _sequence(self, request_id: str, index: int, prompt: list[int], params: SamplingParams, max_tokens: int,
                  deadline: float | None) -> Sequence:  # fmt: skip
        if params.seed is None:
            rng = np.random.default_rng()  # fresh entropy from the OS
        elif index == 0:
            rng = np.random.default_rng(params.seed % 2**64)
        else:  # the request's other sequences: independent streams from the same seed
            rng = np.random.default_rng(np.random.SeedSequence(params.seed % 2**64, spawn_key=(index,)))
        detok = IncrementalDetokenizer(self.tokenizer, prompt, params.stop)
        return Sequence(request_id, index, prompt, params, max_tokens, rng, detok, deadline, self.clock())
