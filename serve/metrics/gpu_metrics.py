"""TorchServe's GPU system metrics, read from nvidia-smi when `/metrics` is rendered:

    GPUUtilization        Percent     {Level="Host", DeviceId, Hostname}   utilization.gpu
    GPUMemoryUtilization  Percent     {Level="Host", DeviceId, Hostname}   memory.used / memory.total
    GPUMemoryUsed         Megabytes   {Level="Host", DeviceId, Hostname}   memory.used (MiB, as nvidia-smi says)

Decisions:
- Only the GPUs this server uses are reported (the first `number_of_gpu` that CUDA shows), and `DeviceId` is
  the CUDA index the workers use (`gpuId::N` in describe), not nvidia-smi's own index (TorchServe reports every
  GPU by nvidia-smi's index, so its DeviceId and the workers' gpu ids disagree under CUDA_VISIBLE_DEVICES).
- Sampled at scrape time, at most once per `max_age` seconds (TorchServe samples every 60 s in the
  background), so the values are fresh and an idle server runs no nvidia-smi at all.
- When nvidia-smi fails, the three families are left out of that page (no stale values); a GPU the driver
  reports no utilization for (a MIG instance) has no GPUUtilization sample.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from serve.config import gpus

LABELS = ("Level", "DeviceId", "Hostname")
Sampler = Callable[[], "dict[str, gpus.GpuUsage] | None"]


class GpuCollector(Collector):
    """The three GPU gauges of the GPUs with these UUIDs (DeviceId = position), from `sampler`."""

    def __init__(self, uuids: Sequence[str], hostname: str, sampler: Sampler = gpus.sample,
                 max_age: float = 5.0) -> None:  # fmt: skip
        self.uuids, self.hostname, self._sampler, self.max_age = tuple(uuids), hostname, sampler, max_age
        self._lock = threading.Lock()
        self._sampled_at = float("-inf")
        self._last: dict[str, gpus.GpuUsage] | None = None

    def describe(self) -> Iterable[Any]:
        return []  # registering must not run nvidia-smi

    def collect(self) -> Iterable[Any]:
        usage = self._usage()
        if not usage:
            return
        help_ = "Torchserve prometheus gauge metric with unit: {}"
        util = GaugeMetricFamily("GPUUtilization", help_.format("Percent"), labels=LABELS)
        memory_util = GaugeMetricFamily("GPUMemoryUtilization", help_.format("Percent"), labels=LABELS)
        memory_used = GaugeMetricFamily("GPUMemoryUsed", help_.format("Megabytes"), labels=LABELS)
        for device_id, uuid in enumerate(self.uuids):
            gpu = usage.get(uuid)
            if gpu is None:
                continue
            labels = ["Host", str(device_id), self.hostname]
            if gpu.utilization is not None:
                util.add_metric(labels, gpu.utilization)
            memory_util.add_metric(labels, round(gpu.memory_percent, 2))
            memory_used.add_metric(labels, gpu.memory_used_mib)
        yield from (util, memory_util, memory_used)

    def _usage(self) -> dict[str, gpus.GpuUsage] | None:
        with self._lock:  # concurrent scrapes share one nvidia-smi run
            now = time.monotonic()
            if now - self._sampled_at >= self.max_age:
                self._last = self._sampler()
                self._sampled_at = time.monotonic()
            return self._last
