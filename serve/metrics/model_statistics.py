"""Triton's statistics extension, kept per model version: what `GET /v2/models/stats` and gRPC ModelStatistics answer.

    stats = InferenceStatistics()
    stats.batch("lin", "1.0", BatchTimes(queue_s=[0.002, 0.001], outcomes=[(True, 0.030), (False, 0.031)],
                                         transfer_s=0.004, handler_s=0.020))
    stats.model_stats("lin", "1.0")   # {"name", "version", "last_inference", "inference_count", "execution_count",
                                      #  "inference_stats": {success, fail, queue, compute_input, compute_infer,
                                      #                      compute_output, cache_hit, cache_miss},
                                      #  "batch_stats": [{"batch_size", "compute_input", "compute_infer",
                                      #                   "compute_output"}]}   every duration {"count", "ns"}

How serve's timings map onto Triton's fields (Triton's meaning from its statistics extension doc):
- `success` / `fail`: requests a worker answered with a status below 400 / from 400 up, or that it failed (an
  exception, a timeout, a lost worker); `ns` is each request's time from entering the model's queue to its answer.
  Requests refused before they reached a worker (a full queue, no worker) are not here: ts_inference_errors_total
  on /metrics counts those.
- `queue`: each dispatched request's wait in the model's queue, as ts_queue_latency_microseconds measures it.
- `compute_infer`: the handler's whole `handle` (preprocess, inference and postprocess), timed by the worker
  process. serve's handler contract is one call, so its three steps are not split: Triton's compute_input and
  compute_output time (preparing the framework's tensors, reading them back) is inside compute_infer here.
- `compute_input`: the rest of the batch's round trip, serve's own marshalling: encoding the batch, the pipe to the
  worker process and back, decoding the answers (round trip minus handler time).
- `compute_output`: counted, always 0 ns: the frontend's encoding of the answer is not timed per model.
- `cache_hit` / `cache_miss`: always 0 (serve has no response cache).
- The compute durations in `inference_stats` are per successful request (a batch of N adds N counts and N times
  its durations, as Triton does); `batch_stats` has one entry per batch size, counting batches.
- `inference_count` counts requests executed (Triton counts batch rows: a request of shape [4, ...] is 4 there;
  serve's pool does not see tensor shapes), `execution_count` the batches, `last_inference` is the last batch's
  end in milliseconds since the epoch.
- Fed by the batch loop of the worker pools (management/batch_statistics.py): a generative model's continuous
  workers (management/continuous.py) are not counted yet; its version answers zeros.
- Only the event loop records (the worker pools) and reads (the frontends), so there is no lock. A version's numbers
  go when it is unregistered (Triton's go when it unloads a model).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

NS = 1_000_000_000
_FIELDS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")
_BATCH_FIELDS = ("compute_input", "compute_infer", "compute_output")


@dataclasses.dataclass
class BatchTimes:
    """One dispatched batch: each request's queue wait and (ok, seconds from queue to answer), the round trip's
    transfer time (round trip minus handler) and the handler's time, all in seconds."""

    queue_s: list[float]
    outcomes: list[tuple[bool, float]]
    transfer_s: float
    handler_s: float


class _Stats:
    __slots__ = ("batches", "durations", "execution_count", "inference_count", "last_inference")

    def __init__(self) -> None:
        self.last_inference = 0
        self.inference_count = 0
        self.execution_count = 0
        self.durations = {f: [0, 0] for f in _FIELDS}  # field -> [count, ns]
        self.batches: dict[int, dict[str, list[int]]] = {}  # batch size -> field -> [count, ns]


def _add(slot: list[int], count: int, seconds: float) -> None:
    slot[0] += count
    slot[1] += int(seconds * NS)


class InferenceStatistics:
    """Triton's per-model statistics for every model version that ran a batch (see the module docstring)."""

    def __init__(self) -> None:
        self._stats: dict[tuple[str, str], _Stats] = {}

    def batch(self, model: str, version: str, times: BatchTimes) -> None:
        stats = self._stats.get((model, version))
        if stats is None:
            stats = self._stats[(model, version)] = _Stats()
        size = len(times.outcomes)
        ok = sum(1 for good, _ in times.outcomes if good)
        stats.last_inference = int(time.time() * 1000)
        stats.inference_count += size
        stats.execution_count += 1
        d = stats.durations
        for good, seconds in times.outcomes:
            _add(d["success" if good else "fail"], 1, seconds)
        for seconds in times.queue_s:
            _add(d["queue"], 1, seconds)
        compute = {"compute_input": times.transfer_s, "compute_infer": times.handler_s, "compute_output": 0.0}
        if ok:
            for name, seconds in compute.items():
                _add(d[name], ok, seconds * ok)
        per_size = stats.batches.setdefault(size, {f: [0, 0] for f in _BATCH_FIELDS})
        for name, seconds in compute.items():
            _add(per_size[name], 1, seconds)

    def forget(self, model: str, version: str) -> None:
        self._stats.pop((model, version), None)

    def model_stats(self, model: str, version: str) -> dict[str, Any]:
        """The version's ModelStatistics in Triton's JSON field names (all zero before its first batch)."""
        stats = self._stats.get((model, version)) or _Stats()
        return {
            "name": model,
            "version": version,
            "last_inference": stats.last_inference,
            "inference_count": stats.inference_count,
            "execution_count": stats.execution_count,
            "inference_stats": {f: _duration(stats.durations[f]) for f in _FIELDS},
            "batch_stats": [_batch(size, fields) for size, fields in sorted(stats.batches.items())],
        }


def _batch(size: int, fields: dict[str, list[int]]) -> dict[str, Any]:
    return {"batch_size": size, **{f: _duration(fields[f]) for f in _BATCH_FIELDS}}


def _duration(slot: list[int]) -> dict[str, int]:
    return {"count": slot[0], "ns": slot[1]}
