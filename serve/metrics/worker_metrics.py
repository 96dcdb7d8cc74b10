"""Worker memory on the `/metrics` page, read when the page is rendered:

    ts_worker_memory_bytes   gauge   {model_name, model_version, hostname, worker_id}   resident memory (RSS)

Decisions:
- The name follows our other `ts_*` metrics (snake case, the unit in the name, the model labels first) and
  `worker_id` is the worker's `id` in describe (TorchServe's worker port numbers). TorchServe reports no
  per-worker memory on its metrics page; its host gauge `MemoryUsed` (megabytes) sums the whole machine.
- Sampled at scrape time through a reader the pool registers when a worker is READY (one read of
  /proc/<pid>/statm per worker), so an idle worker's value is current; a worker that exited is dropped at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

NAME = "ts_worker_memory_bytes"
LABELS = ("model_name", "model_version", "hostname", "worker_id")
Reader = Callable[[], int]


class WorkerMemoryCollector(Collector):
    """Each registered worker's resident memory, read from its reader when collected."""

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname
        self._lock = threading.Lock()  # the page may be rendered off the event loop
        self._readers: dict[tuple[str, str, str], Reader] = {}

    def watch(self, model: str, version: str, worker_id: str, reader: Reader) -> None:
        with self._lock:
            self._readers[(model, version, worker_id)] = reader

    def forget(self, model: str, version: str, worker_id: str | None = None, reader: Reader | None = None) -> None:
        """Drop one worker (only while `reader` is still its reader, when given), or every worker of the version."""
        with self._lock:
            for key in [k for k in self._readers if k[:2] == (model, version) and worker_id in (None, k[2])]:
                if reader is None or self._readers[key] == reader:
                    del self._readers[key]

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        with self._lock:
            readers = list(self._readers.items())
        family = GaugeMetricFamily(NAME, "Resident memory of each worker process in bytes", labels=LABELS)
        for (model, version, worker_id), reader in readers:
            value = reader()
            if value > 0:
                family.add_metric([model, version, self.hostname, worker_id], float(value))
        yield family
