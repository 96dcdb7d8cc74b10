"""vLLM's metrics for a generative handler, recorded into the worker's `context.metrics` from the engine's thread.

    metrics = GenerationMetrics(context.metrics, context.model_name, engine)    # in initialize
    timer = metrics.request()                                                  # when a request arrives (submit)
    timer.output(out)                                                          # each RequestOutput, engine's thread

Names are vLLM's with the prefix `serve:` for `vllm:` (spec/generative.md "Token accounting and metrics"), labelled
`model_name` (and `finished_reason` on the success counter), so vLLM's Grafana dashboards read them after replacing
the prefix. The worker sends the records with its next frame (serve/worker/continuous.py); the server turns them
into Prometheus families with vLLM's buckets (serve/metrics/backend_metrics.py).

Decisions, and why:
- Per request, when a sequence finishes (whatever the reason, "abort" included: a client that left still used the
  engine): the latency histograms, its token counts, `request_success_total{finished_reason}`. Time to first token,
  inter-token latency and end-to-end are measured here, on the clock of the handler (monotonic), from the arrival at
  `submit` to the delivery of each output, which is when the client's chunk leaves: tokenization and queueing count,
  as in vLLM's. Queue, prefill, decode and inference time come from the engine's RequestMetrics (first scheduled,
  first token, finished), as vLLM's do; a phase the sequence never reached is not observed.
- The engine-wide numbers (running, waiting, KV cache usage; preemptions and prefix-cache queries/hits as counter
  increments from `engine.stats()`) are read on the engine's thread at most every `interval` s while it delivers
  outputs, and at every finish, so the last finish before the engine goes idle sets the gauges back to 0 (the records
  of a cancelled request's finish still travel: continuous.py sends them alone).
- Every series starts at 0 at load (the success counter for each finish reason, as vLLM does), so a dashboard shows
  an idle model as 0, not as missing.
- Token counters count at the finish (prompt and generated tokens of the finished sequence), so
  `generation_tokens_total` equals the sum of the usage the API reported once every stream has ended.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from serve.generation import LLMEngine, RequestOutput
from serve.worker.metrics_cache import CachingMetric, MetricsCache

log = logging.getLogger(__name__)

PREFIX = "serve:"
FINISH_REASONS = ("stop", "length", "abort")
HISTOGRAMS = {  # name: unit
    "time_to_first_token_seconds": "s",
    "inter_token_latency_seconds": "s",
    "e2e_request_latency_seconds": "s",
    "request_queue_time_seconds": "s",
    "request_inference_time_seconds": "s",
    "request_prefill_time_seconds": "s",
    "request_decode_time_seconds": "s",
    "request_prompt_tokens": "count",
    "request_generation_tokens": "count",
}
COUNTERS = ("prompt_tokens_total", "generation_tokens_total", "num_preemptions_total", "prefix_cache_queries_total",
            "prefix_cache_hits_total")  # fmt: skip
GAUGES = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc")
ENGINE_COUNTERS = {"num_preemptions_total": "num_preemptions", "prefix_cache_queries_total": "prefix_cache_queries",
                   "prefix_cache_hits_total": "prefix_cache_hits"}  # fmt: skip


class GenerationMetrics:
    def __init__(self, cache: MetricsCache, model_name: str, engine: LLMEngine, interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.engine, self.model_name, self.interval, self.clock = engine, model_name, interval, clock
        labels = ["model_name"]
        self.metric: dict[str, CachingMetric] = {}
        for name, unit in HISTOGRAMS.items():
            self.metric[name] = cache.add_metric_to_cache(PREFIX + name, unit, labels, "histogram")
        for name in COUNTERS:
            self.metric[name] = cache.add_metric_to_cache(PREFIX + name, "count", labels, "counter")
        for name, unit in zip(GAUGES, ("count", "count", "fraction")):
            self.metric[name] = cache.add_metric_to_cache(PREFIX + name, unit, labels, "gauge")
        self.success = cache.add_metric_to_cache(PREFIX + "request_success_total", "count",
                                                 ["model_name", "finished_reason"], "counter")  # fmt: skip
        self._lock = threading.Lock()  # the engine's thread records; a new engine thread may follow an idle one
        self._seen = {key: 0 for key in ENGINE_COUNTERS.values()}
        self._last_snapshot = -float("inf")
        for name in COUNTERS:
            self.add(name, 0)
        for reason in FINISH_REASONS:
            self.success.add_or_update(0, [model_name, reason])
        self.snapshot(force=True)

    def request(self) -> RequestTimer:
        """A timer for a request arriving now."""
        return RequestTimer(self, self.clock())

    def add(self, name: str, value: float) -> None:
        self.metric[name].add_or_update(value, [self.model_name])

    def snapshot(self, force: bool = False) -> None:
        """Record the engine's gauges and counter increments, if `interval` s passed since the last time (or
        `force`); call it on the engine's thread (engine.stats() reads the scheduler)."""
        with self._lock:
            now = self.clock()
            if not force and now - self._last_snapshot < self.interval:
                return
            self._last_snapshot = now
            stats = self.engine.stats()
            self.add("num_requests_running", stats["running"])
            self.add("num_requests_waiting", stats["waiting"])
            self.add("kv_cache_usage_perc", float(stats["kv_cache_usage"]))
            for name, key in ENGINE_COUNTERS.items():
                delta, self._seen[key] = stats[key] - self._seen[key], stats[key]
                if delta > 0:
                    self.add(name, delta)


class RequestTimer:
    """One request's times, per sequence index; `output` is called with each of its RequestOutputs."""

    def __init__(self, metrics: GenerationMetrics, arrival: float) -> None:
        self.metrics, self.arrival = metrics, arrival
        self._first: dict[int, float] = {}  # index -> when its first token was delivered
        self._last: dict[int, float] = {}
        self._gaps: dict[int, list[float]] = {}

    def output(self, out: RequestOutput) -> None:
        try:
            self._output(out)
        except Exception:  # a metrics bug must not stop the stream (the callback raising would abort it)
            log.exception("recording the metrics of request %s failed", out.request_id)

    def _output(self, out: RequestOutput) -> None:
        now = self.metrics.clock()
        if out.new_token_ids:
            if out.index in self._last:
                self._gaps.setdefault(out.index, []).append(now - self._last[out.index])
            self._first.setdefault(out.index, now)
            self._last[out.index] = now
        if out.finished:
            self._finished(out, now)
        self.metrics.snapshot(force=out.finished)

    def failed(self) -> None:
        """The engine failed the request without an output (its own step raised)."""
        self.metrics.snapshot(force=True)

    def _finished(self, out: RequestOutput, now: float) -> None:
        m, add = self.metrics, self.metrics.add
        first = self._first.get(out.index)
        if first is not None:
            add("time_to_first_token_seconds", first - self.arrival)
        for gap in self._gaps.pop(out.index, []):
            add("inter_token_latency_seconds", gap)
        add("e2e_request_latency_seconds", now - self.arrival)
        for name, seconds in _phases(out).items():
            add(name, seconds)
        add("request_prompt_tokens", out.prompt_tokens)
        add("request_generation_tokens", out.completion_tokens)
        add("prompt_tokens_total", out.prompt_tokens)
        add("generation_tokens_total", out.completion_tokens)
        m.success.add_or_update(1, [m.model_name, out.finish_reason or "abort"])


def _phases(out: RequestOutput) -> dict[str, float]:
    """vLLM's per-phase times from the engine's RequestMetrics; a phase not reached is left out."""
    t: Any = out.metrics
    if t is None:
        return {}
    phases = {}
    if t.first_scheduled is not None:
        phases["request_queue_time_seconds"] = t.first_scheduled - t.arrival
        phases["request_inference_time_seconds"] = t.finished - t.first_scheduled
        if t.first_token is not None:
            phases["request_prefill_time_seconds"] = t.first_token - t.first_scheduled
    if t.first_token is not None:
        phases["request_decode_time_seconds"] = t.finished - t.first_token
    return phases
