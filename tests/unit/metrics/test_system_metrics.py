"""The host gauges (serve/metrics/system_metrics.py): psutil's formulas on known /proc files, the disk against the
standard library's shutil.disk_usage, sane values on this machine, and the sampler thread."""

from __future__ import annotations

import shutil
import threading
import time

import pytest

from serve.metrics.system_metrics import UNITS, SystemMetrics, cpu_times, disk, memory

MEMINFO = """MemTotal:        8000000 kB
MemFree:         1000000 kB
MemAvailable:    5000000 kB
Buffers:          200000 kB
Cached:          2500000 kB
SwapCached:            0 kB
SReclaimable:     300000 kB
"""


def test_memory_is_psutils_virtual_memory(tmp_path):
    path = tmp_path / "meminfo"
    path.write_text(MEMINFO)
    values = memory(str(path))
    # psutil (Linux): used = total - free - buffers - (cached + SReclaimable); percent = (total - available) / total
    assert values["MemoryUsed"] == pytest.approx((8000000 - 1000000 - 200000 - 2800000) / 1024)
    assert values["MemoryAvailable"] == pytest.approx(5000000 / 1024)
    assert values["MemoryUtilization"] == 37.5


def test_memory_used_falls_back_when_cache_exceeds_it(tmp_path):
    path = tmp_path / "meminfo"
    path.write_text(MEMINFO.replace("Cached:          2500000", "Cached:          9000000"))
    assert memory(str(path))["MemoryUsed"] == pytest.approx((8000000 - 1000000) / 1024)  # total - free, as psutil


def test_cpu_utilization_is_the_busy_share_between_two_samples(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3\n")
    assert cpu_times(str(stat)) == (200, 1000)  # idle + iowait are not busy
    samples = iter([(200, 1000), (260, 1100)])
    monkeypatch.setattr("serve.metrics.system_metrics.cpu_times", lambda: next(samples))
    system = SystemMetrics("h", tmp_path)
    assert system.sample()["CPUUtilization"] == 20.0  # the first sample: since boot
    assert system.sample()["CPUUtilization"] == 60.0  # 60 busy of 100 jiffies since the last sample


def test_disk_is_the_filesystem_of_the_path(tmp_path):
    values = disk(tmp_path)
    usage = shutil.disk_usage(tmp_path)  # used = (blocks - bfree) * frsize, free = bavail * frsize
    gb = float(1 << 30)
    assert values["DiskUsage"] == pytest.approx(usage.used / gb, abs=0.5)  # other processes write meanwhile
    assert values["DiskAvailable"] == pytest.approx(usage.free / gb, abs=0.5)
    assert values["DiskUtilization"] == pytest.approx(100 * usage.used / (usage.used + usage.free), abs=1.0)


def test_values_on_this_host_are_sane(tmp_path):
    values = SystemMetrics("h", tmp_path).sample()
    assert set(values) == set(UNITS)
    assert values["MemoryUsed"] > 0 and values["MemoryAvailable"] > 0 and values["DiskAvailable"] >= 0
    for name in ("CPUUtilization", "MemoryUtilization", "DiskUtilization"):
        assert 0 <= values[name] <= 100, (name, values[name])


def test_the_sampler_samples_at_start_and_every_interval(tmp_path):
    seen: list[dict[str, float]] = []
    got_two = threading.Event()

    def on_sample(values: dict[str, float]) -> None:
        seen.append(values)
        if len(seen) >= 2:
            got_two.set()

    system = SystemMetrics("h", tmp_path, interval=0.05, on_sample=on_sample)
    system.start()
    try:
        assert len(seen) >= 1  # the first sample is taken by start() itself
        assert got_two.wait(60)  # bounded: a loaded machine may delay the thread, never for a minute
    finally:
        system.stop()
    count = len(seen)
    time.sleep(0.2)
    assert len(seen) == count  # stopped


def test_collect_yields_torchserves_gauges(tmp_path):
    system = SystemMetrics("myhost", tmp_path)
    assert list(system.collect()) == []  # nothing before the first sample
    system.sample()
    families = {f.name: f for f in system.collect()}
    assert list(families) == list(UNITS)
    for name, family in families.items():
        assert family.type == "gauge" and family.documentation.endswith(f"unit: {UNITS[name]}")
        [sample] = family.samples
        assert sample.labels == {"Level": "Host", "Hostname": "myhost"}
