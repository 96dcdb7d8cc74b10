"""Triton's statistics from serve's batch timings (serve/metrics/model_statistics.py, management/batch_statistics.py):
the field mapping its docstring states, against numbers computed by hand."""

from __future__ import annotations

import asyncio

from serve.batching.job import InferenceRequest, Job
from serve.management.batch_statistics import batch_times
from serve.metrics.model_statistics import NS, BatchTimes, InferenceStatistics


def _job(enqueued: float) -> Job:
    loop = asyncio.new_event_loop()
    future = loop.create_future()  # never awaited: batch_times reads only the enqueue time
    loop.close()
    return Job(InferenceRequest("r", {}), future, enqueue_time=enqueued)


def test_a_batch_adds_per_request_counts_and_per_batch_entries() -> None:
    stats = InferenceStatistics()
    times = BatchTimes(queue_s=[0.002, 0.004], outcomes=[(True, 0.03), (False, 0.05)], transfer_s=0.001,
                       handler_s=0.02)  # fmt: skip
    stats.batch("m", "1", times)
    stats.batch("m", "1", BatchTimes([0.001], [(True, 0.01)], 0.0005, 0.005))
    got = stats.model_stats("m", "1")
    assert (got["inference_count"], got["execution_count"]) == (3, 2) and got["last_inference"] > 0
    s = got["inference_stats"]
    assert s["success"] == {"count": 2, "ns": int(0.03 * NS) + int(0.01 * NS)}
    assert s["fail"] == {"count": 1, "ns": int(0.05 * NS)}
    assert s["queue"]["count"] == 3
    # compute per successful request: batch 1 had one success (its durations once), batch 2 one
    assert s["compute_infer"] == {"count": 2, "ns": int(0.02 * NS) + int(0.005 * NS)}
    assert s["compute_input"]["count"] == 2 and s["compute_output"] == {"count": 2, "ns": 0}
    assert s["cache_hit"] == s["cache_miss"] == {"count": 0, "ns": 0}
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in got["batch_stats"]] == [(1, 1), (2, 1)]
    stats.forget("m", "1")
    assert stats.model_stats("m", "1")["inference_count"] == 0


def test_batch_times_reads_the_workers_reply() -> None:
    jobs = [_job(10.0), _job(10.5)]
    ok = {"type": "result", "handler_ms": 300.0, "responses": [{"status": 200}, {"status": 400}]}
    t = batch_times(jobs, ok, dispatched_at=11.0, finished_at=11.5)
    assert t.queue_s == [1.0, 0.5] and t.outcomes == [(True, 1.5), (False, 1.0)]
    assert abs(t.handler_s - 0.3) < 1e-9 and abs(t.transfer_s - 0.2) < 1e-9
    assert [o for o, _ in batch_times(jobs, {"error": {"code": 500}}, 11.0, 11.5).outcomes] == [False, False]
    lost = batch_times(jobs, "Worker died.", 11.0, 11.5)
    assert [o for o, _ in lost.outcomes] == [False, False] and lost.handler_s == 0.0
    stream_end = batch_times(jobs, {"type": "result", "end": True, "handler_ms": 9000.0}, 11.0, 11.5)
    assert [o for o, _ in stream_end.outcomes] == [True, True] and stream_end.handler_s == 0.5  # never past the trip
