"""`describe_worker`: one entry of describe's `workers` list, TorchServe's worker object for a slot.

    {"id": "9000", "startTime": "2026-01-02T03:04:05.678Z", "status": "READY", "memoryUsage": 123456, "pid": 42,
     "gpu": false, "gpuUsage": "N/A", "optimized": true, "optimizeReason": null, "warmedBatchSizes": [1, 2]}

Status: READY, STARTING (loading), RESTARTING (waiting out a back-off after a failure), UNLOADING (stopping),
FAILED (gave up); TorchServe shows only READY and UNLOADING. `lastError` is added when the slot has one: why it
last restarted, kept once it is READY again. `startTime` is TorchServe's format in UTC (TorchServe prints local
time). `gpuUsage` is `gpuId::N` alone: TorchServe appends nvidia-smi's utilization and memory there (running
nvidia-smi on every describe); here those are the GPU gauges on /metrics.
Ours, after TorchServe's fields: `optimized` (the worker's model runs its inference plan), `optimizeReason` (why
not, else null) and `warmedBatchSizes` (the batch sizes planned before the worker reported ready); see
serve/worker/optimizing.py.
"""

from __future__ import annotations

import time
from typing import Any

from serve.management.worker_process import STOPPED, UNLOADING, WorkerProcess
from serve.management.worker_slot import WorkerSlot


def describe_worker(slot: WorkerSlot) -> dict[str, Any]:
    """TorchServe's worker object: id, startTime, status, memoryUsage, pid, gpu, gpuUsage (+ lastError)."""
    w = slot.worker
    start = w.start_time if w is not None else time.time()
    entry: dict[str, Any] = {
        "id": slot.id,
        "startTime": _timestamp(start),
        "status": UNLOADING if slot.stopping and slot.state != STOPPED else slot.state,
        "memoryUsage": w.memory_usage() if w is not None and w.alive else 0,
        "pid": w.pid if w is not None and w.pid is not None else -1,
        "gpu": slot.gpu is not None,
        "gpuUsage": "N/A" if slot.gpu is None else f"gpuId::{slot.gpu}",
    }
    entry.update(_optimization(w))
    if slot.last_error:
        entry["lastError"] = slot.last_error
    return entry


def _optimization(worker: WorkerProcess | None) -> dict[str, Any]:
    """Ours: whether the worker's model runs optimized, why not, and the batch sizes warmed before it was ready."""
    report = getattr(worker, "optimization", None) or {}  # set by the ready handshake of this process
    if not report:
        return {"optimized": False, "optimizeReason": "the worker has not loaded the model", "warmedBatchSizes": []}
    warmed = report.get("warmed")
    return {"optimized": bool(report.get("optimized")), "optimizeReason": report.get("reason"),
            "warmedBatchSizes": warmed if isinstance(warmed, list) else []}  # fmt: skip


def _timestamp(epoch: float) -> str:
    """TorchServe's startTime format, yyyy-MM-dd'T'HH:mm:ss.SSS'Z', in UTC (TorchServe prints local time)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch * 1000) % 1000:03d}Z"
