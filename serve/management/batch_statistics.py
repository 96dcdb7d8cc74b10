"""One dispatched batch's timings for Triton's statistics extension (serve/metrics/model_statistics.py says how they
map onto Triton's fields), read from what the worker pool already has: each job's enqueue time, the dispatch and
reply times around `run_batch`, and the worker's reply (its `handler_ms`, each request's status, or the batch's
error; a string when the worker was lost).

    times = batch_times(jobs, reply, dispatched_at, finished_at)   # monotonic seconds
    metrics.statistics.batch(model, version, times)
"""

from __future__ import annotations

from typing import Any

from serve.batching.job import Job
from serve.metrics.model_statistics import BatchTimes


def batch_times(jobs: list[Job], reply: dict[str, Any] | str, dispatched_at: float, finished_at: float) -> BatchTimes:
    """The batch's `BatchTimes`: a lost worker or a batch error fails every request, else each response's status
    does (below 400: success); a streamed answer counts as a success once its first chunk came."""
    ok = _outcomes(reply, len(jobs))
    round_trip = max(finished_at - dispatched_at, 0.0)
    handler_s = 0.0 if isinstance(reply, str) else float(reply.get("handler_ms", 0.0)) / 1000
    handler_s = min(handler_s, round_trip)  # the worker's clock, but never more than the round trip it is part of
    return BatchTimes(
        queue_s=[max(dispatched_at - j.enqueue_time, 0.0) for j in jobs],
        outcomes=[(good, max(finished_at - j.enqueue_time, 0.0)) for good, j in zip(ok, jobs, strict=True)],
        transfer_s=round_trip - handler_s,
        handler_s=handler_s,
    )


def _outcomes(reply: dict[str, Any] | str, n: int) -> list[bool]:
    if isinstance(reply, str) or reply.get("error") is not None:
        return [False] * n
    responses = reply.get("responses")
    if not isinstance(responses, list) or len(responses) != n:  # the end of a stream: every request was answered
        return [True] * n
    return [isinstance(r, dict) and int(r.get("status", 500)) < 400 for r in responses]
