"""TorchServe's host metrics (its default metrics.yaml, `ts_metrics` gauges), sampled every `metric_time_interval`:

    CPUUtilization     Percent     {Level="Host", Hostname}   busy share of all CPUs since the last sample
    MemoryUsed         Megabytes   {Level="Host", Hostname}   MemTotal - MemFree - Buffers - Cached - SReclaimable
    MemoryAvailable    Megabytes   {Level="Host", Hostname}   MemAvailable
    MemoryUtilization  Percent     {Level="Host", Hostname}   (MemTotal - MemAvailable) / MemTotal
    DiskUsage          Gigabytes   {Level="Host", Hostname}   used bytes of the model store's filesystem
    DiskUtilization    Percent     {Level="Host", Hostname}   used / (used + available to unprivileged users)
    DiskAvailable      Gigabytes   {Level="Host", Hostname}   available to unprivileged users

Megabytes and gigabytes are 2**20 and 2**30 bytes, as TorchServe's psutil-based collector computes them; the
memory and disk formulas are psutil's `virtual_memory()` and `disk_usage()` on Linux, so a dashboard built on
TorchServe reads the same numbers. (The GPU gauges are gpu_metrics.py's.)

Decisions:
- Read from /proc/stat and /proc/meminfo and `os.statvfs`, not psutil: no dependency, three small reads.
- Sampled by one daemon thread every `metric_time_interval` seconds (TorchServe's key and default, 60), the first
  sample at start, as TorchServe schedules its collector; the page shows the last sample. CPUUtilization is the
  busy share of CPU time between two samples (the first: since boot); TorchServe's collector runs psutil's
  `cpu_percent()` once in a fresh process, whose first call has no earlier reading to compare with.
- The disk is the one holding the model store (the server's working directory without one): that is the disk a
  server fills; TorchServe measures `/`.
- `disable_system_metrics=true` (TorchServe's key) starts no sampler: the families are absent.
- Each sample is also handed to `on_sample` (the metrics log, metrics_log.py, in metrics_mode log or legacy).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

LABELS = ("Level", "Hostname")
# name -> unit, in TorchServe's metrics.yaml order
UNITS = {
    "CPUUtilization": "Percent",
    "MemoryUsed": "Megabytes",
    "MemoryAvailable": "Megabytes",
    "MemoryUtilization": "Percent",
    "DiskUsage": "Gigabytes",
    "DiskUtilization": "Percent",
    "DiskAvailable": "Gigabytes",
}
MB, GB = float(1 << 20), float(1 << 30)
Sample = dict[str, float]


def cpu_times(stat: str = "/proc/stat") -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot: idle and iowait are not busy; guest time is inside user's."""
    with open(stat) as f:
        fields = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    idle = fields[3] + fields[4]
    total = sum(fields)
    return total - idle, total


def memory(meminfo: str = "/proc/meminfo") -> Sample:
    """MemoryUsed, MemoryAvailable (MB) and MemoryUtilization (%) as psutil's virtual_memory() on Linux."""
    kib: dict[str, int] = {}
    with open(meminfo) as f:
        for line in f:
            key, _, rest = line.partition(":")
            kib[key] = int(rest.split()[0])
    total = kib["MemTotal"] * 1024
    available = kib.get("MemAvailable", kib["MemFree"]) * 1024
    cached = (kib.get("Cached", 0) + kib.get("SReclaimable", 0)) * 1024
    used = total - kib["MemFree"] * 1024 - kib.get("Buffers", 0) * 1024 - cached
    if used < 0:  # as psutil: some kernels count more cache than is used
        used = total - kib["MemFree"] * 1024
    return {"MemoryUsed": used / MB, "MemoryAvailable": available / MB,
            "MemoryUtilization": round(100.0 * (total - available) / total, 1)}  # fmt: skip


def disk(path: str | Path) -> Sample:
    """DiskUsage, DiskAvailable (GB) and DiskUtilization (%) of the filesystem holding `path`, as psutil's
    disk_usage(): the share of the space an unprivileged user may fill that is filled."""
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    available = st.f_bavail * st.f_frsize
    room = used + available
    return {"DiskUsage": used / GB, "DiskUtilization": round(100.0 * used / room, 1) if room else 0.0,
            "DiskAvailable": available / GB}  # fmt: skip


class SystemMetrics(Collector):
    """The host gauges from the last sample; `start()` samples now and every `interval` s until `stop()`."""

    def __init__(self, hostname: str, disk_path: str | Path, interval: float = 60.0,
                 on_sample: Callable[[Sample], None] | None = None) -> None:  # fmt: skip
        self.hostname, self.disk_path, self.interval, self.on_sample = hostname, disk_path, interval, on_sample
        self._lock = threading.Lock()
        self._last: Sample = {}
        self._cpu = (0, 0)  # (busy, total) at the last sample: CPUUtilization is measured from it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> Sample:
        """Read the host now; the values (a metric whose source cannot be read is left out, with a warning)."""
        values: Sample = {}
        try:
            busy, total = cpu_times()
            before_busy, before_total = self._cpu
            self._cpu = (busy, total)
            if total > before_total:
                values["CPUUtilization"] = round(100.0 * (busy - before_busy) / (total - before_total), 1)
        except (OSError, ValueError, IndexError) as e:
            log.warning("CPUUtilization: cannot read /proc/stat: %s", e)
        try:
            values.update(memory())
        except (OSError, ValueError, KeyError, IndexError, ZeroDivisionError) as e:
            log.warning("Memory metrics: cannot read /proc/meminfo: %s", e)
        try:
            values.update(disk(self.disk_path))
        except OSError as e:
            log.warning("Disk metrics: cannot read the filesystem of %s: %s", self.disk_path, e)
        with self._lock:
            self._last = values
        if self.on_sample is not None:
            self.on_sample(values)
        return values

    def start(self) -> None:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="system-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except Exception:  # never let the sampler die: the next interval tries again
                log.exception("system metrics: sampling failed")

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        with self._lock:
            last = dict(self._last)
        for name, unit in UNITS.items():
            if name in last:
                family = GaugeMetricFamily(name, f"Torchserve prometheus gauge metric with unit: {unit}", labels=LABELS)
                family.add_metric(["Host", self.hostname], last[name])
                yield family
