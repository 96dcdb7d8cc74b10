"""handlers/generation_metrics.py: vLLM's metrics of a generative handler, on a fake clock and engine (the snapshot
cadence, counter increments, the phases), and in-process on the tinychat handler (counts and sums that must agree
with what the requests reported)."""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from handlers.generation_metrics import GenerationMetrics
from handlers.text_generation import TextGenerationHandler
from serve.generation import RequestMetrics, RequestOutput
from serve.worker.context import Context
from serve.worker.metrics_cache import MetricRecord, MetricsCache

FOLDER = Path(__file__).resolve().parents[3] / "examples" / "tinychat" / "model"


class FakeEngine:
    def __init__(self) -> None:
        self.values = {"running": 0, "waiting": 0, "kv_cache_usage": 0.0, "num_preemptions": 0,
                       "prefix_cache_queries": 0, "prefix_cache_hits": 0}  # fmt: skip

    def stats(self) -> dict[str, Any]:
        return dict(self.values)


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def _by_name(records: list[MetricRecord]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for r in records:
        out[r.name.removeprefix("serve:")].append(r.value)
    return out


def _output(index: int, tokens: list[int], finished: bool = False, completion: int = 0,
            metrics: RequestMetrics | None = None) -> RequestOutput:  # fmt: skip
    return RequestOutput("r", index, tokens, "", finished, "length" if finished else None, 5, completion,
                         metrics=metrics)  # fmt: skip


def test_series_start_at_zero_with_vllms_names_and_labels():
    cache = MetricsCache("m")
    GenerationMetrics(cache, "m", FakeEngine())  # type: ignore[arg-type]
    records = cache.drain()
    assert {r.name for r in records} == {f"serve:{n}" for n in (
        "prompt_tokens_total", "generation_tokens_total", "num_preemptions_total", "prefix_cache_queries_total",
        "prefix_cache_hits_total", "request_success_total", "num_requests_running", "num_requests_waiting",
        "kv_cache_usage_perc")}  # fmt: skip
    assert all(r.value == 0 for r in records)
    success = sorted(dict(r.dimensions)["finished_reason"] for r in records if r.name.endswith("success_total"))
    assert success == ["abort", "length", "stop"]
    assert {r.dimensions[0] for r in records} == {("model_name", "m")}


def test_one_request_gives_its_latencies_tokens_and_phases():
    cache, engine, clock = MetricsCache("m"), FakeEngine(), Clock()
    metrics = GenerationMetrics(cache, "m", engine, clock=clock)  # type: ignore[arg-type]
    cache.drain()
    timer = metrics.request()  # arrives at 100
    clock.now = 100.5
    timer.output(_output(0, [7]))  # first token at +0.5
    clock.now = 100.7
    timer.output(_output(0, [8]))
    clock.now = 101.0
    engine.values |= {"num_preemptions": 2, "prefix_cache_queries": 16, "prefix_cache_hits": 8}
    phases = RequestMetrics(arrival=10.0, first_scheduled=10.1, first_token=10.4, finished=10.9, num_cached_tokens=0,
                            num_preemptions=0)  # fmt: skip
    timer.output(_output(0, [9], finished=True, completion=3, metrics=phases))
    got = _by_name(cache.drain())
    assert got["time_to_first_token_seconds"] == [pytest.approx(0.5)]
    assert got["inter_token_latency_seconds"] == [pytest.approx(0.2), pytest.approx(0.3)]
    assert got["e2e_request_latency_seconds"] == [pytest.approx(1.0)]
    assert got["request_queue_time_seconds"] == [pytest.approx(0.1)]
    assert got["request_prefill_time_seconds"] == [pytest.approx(0.3)]
    assert got["request_decode_time_seconds"] == [pytest.approx(0.5)]
    assert got["request_inference_time_seconds"] == [pytest.approx(0.8)]
    assert got["request_prompt_tokens"] == [5] and got["request_generation_tokens"] == [3]
    assert got["prompt_tokens_total"] == [5] and got["generation_tokens_total"] == [3]
    assert got["request_success_total"] == [1]
    # the finish forced a snapshot: the engine's counters went up by their increments
    assert got["num_preemptions_total"] == [2] and got["prefix_cache_queries_total"] == [16]
    assert got["prefix_cache_hits_total"] == [8] and got["num_requests_running"] == [0]


def test_gauges_at_most_every_interval_and_at_each_finish():
    cache, engine, clock = MetricsCache("m"), FakeEngine(), Clock()
    metrics = GenerationMetrics(cache, "m", engine, interval=1.0, clock=clock)  # type: ignore[arg-type]
    cache.drain()
    timer = metrics.request()
    engine.values["running"] = 1
    for now in (100.3, 100.6, 100.9):  # within a second of the load's snapshot: nothing
        clock.now = now
        timer.output(_output(0, [1]))
    assert "num_requests_running" not in _by_name(cache.drain())
    clock.now = 101.1
    timer.output(_output(0, [1]))
    assert _by_name(cache.drain())["num_requests_running"] == [1]
    clock.now = 101.2  # a finish snapshots at once, whatever the interval
    engine.values["running"] = 0
    timer.output(_output(0, [], finished=True, completion=4))
    assert _by_name(cache.drain())["num_requests_running"] == [0]


def test_an_aborted_request_before_its_first_token_has_no_ttft_or_prefill():
    cache, clock = MetricsCache("m"), Clock()
    metrics = GenerationMetrics(cache, "m", FakeEngine(), clock=clock)  # type: ignore[arg-type]
    cache.drain()
    timer = metrics.request()
    clock.now = 100.4
    queued = RequestMetrics(10.0, None, None, 10.4, 0, 0)
    out = RequestOutput("r", 0, [], "", True, "abort", 5, 0, metrics=queued)
    timer.output(out)
    got = _by_name(cache.drain())
    for name in ("time_to_first_token_seconds", "inter_token_latency_seconds", "request_queue_time_seconds",
                 "request_prefill_time_seconds", "request_decode_time_seconds"):  # fmt: skip
        assert name not in got
    assert got["e2e_request_latency_seconds"] == [pytest.approx(0.4)] and got["request_success_total"] == [1]


def test_the_handler_records_agree_with_what_its_requests_reported():
    """The tinychat handler in process: 3 concurrent chats; one histogram observation per request, generated tokens
    summed == the completion_tokens the chunks reported, one ITL gap per token after the first, running back to 0."""
    handler = TextGenerationHandler()
    config = {"handler": {"kv_cache_bytes": "4MiB", "max_num_batched_tokens": 16}}
    context = Context("tinychat", str(FOLDER), {"model": {}}, 1, None, "0.1.0", model_yaml_config=config)
    handler.initialize(context)
    context.metrics.drain()
    done = {f"r{i}": threading.Event() for i in range(3)}
    last: dict[str, Any] = {}

    def emit_for(rid: str) -> Any:
        def emit(body: Any, final: bool = False, code: int = 200) -> None:
            last[rid] = body
            if final:
                done[rid].set()

        return emit

    for i, question in enumerate(["Count to 5.", "Hello!", "What colour is grass?"]):
        body = {"messages": [{"role": "user", "content": question}], "sampling": {"temperature": 0, "max_tokens": 12}}
        handler.submit(f"r{i}", {"body": body}, context, emit_for(f"r{i}"))
    assert all(event.wait(120) for event in done.values()), "a request did not finish"
    got = _by_name(context.metrics.drain())
    completion = [last[rid]["completion_tokens"] for rid in sorted(last)]
    per_request = ["time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds"]
    per_request += ["request_prefill_time_seconds", "request_decode_time_seconds", "request_generation_tokens"]
    for name in per_request:
        assert len(got[name]) == 3, name
    assert sorted(got["request_generation_tokens"]) == sorted(completion)
    assert sum(got["generation_tokens_total"]) == sum(completion)
    assert len(got["inter_token_latency_seconds"]) == sum(completion) - 3
    assert sum(got["request_success_total"]) == 3
    assert got["num_requests_running"][-1] == 0 and got["num_requests_waiting"][-1] == 0
    assert got["kv_cache_usage_perc"][-1] == 0.0
    assert max(got["time_to_first_token_seconds"]) <= max(got["e2e_request_latency_seconds"])
