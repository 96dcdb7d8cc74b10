"""GPU gauges on /metrics from nvidia-smi (a fake one first on PATH): TorchServe's names, units and labels, DeviceId
as the workers' gpu id, sampling at most every few seconds, nothing when nvidia-smi fails or there are no GPUs, and
a real server with the fake on PATH."""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx
import pytest

from serve.config import gpus
from serve.metrics import ServerMetrics
from serve.metrics.gpu_metrics import GpuCollector
from tests.integration.server import ServerProcess, recorder_archive
from tests.unit.config.fake_nvidia_smi import UUIDS, calls, fake_nvidia_smi

A, B = UUIDS
GPU_FAMILIES = ("GPUUtilization", "GPUMemoryUtilization", "GPUMemoryUsed")


def samples(page: str, name: str) -> dict[str, float]:
    """{DeviceId: value} of one family on a Prometheus page."""
    out = {}
    for labels, value in re.findall(rf"^{name}\{{(.*)\}} (\S+)$", page, re.M):
        out[re.search(r'DeviceId="(\d+)"', labels).group(1)] = float(value)
    return out


def page_of(metrics: ServerMetrics) -> str:
    return metrics.render()[0].decode()


@pytest.fixture
def fake_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = fake_nvidia_smi(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return bin_dir


def test_gauges_have_torchserves_names_units_and_labels(fake_on_path):
    metrics = ServerMetrics(hostname="h")
    metrics.watch_gpus([B, A])  # CUDA device 0 is nvidia-smi's GPU 1 (CUDA_VISIBLE_DEVICES=1,0)
    page = page_of(metrics)
    assert "# HELP GPUUtilization Torchserve prometheus gauge metric with unit: Percent" in page
    assert "# HELP GPUMemoryUtilization Torchserve prometheus gauge metric with unit: Percent" in page
    assert "# HELP GPUMemoryUsed Torchserve prometheus gauge metric with unit: Megabytes" in page
    assert "# TYPE GPUMemoryUsed gauge" in page
    assert 'GPUMemoryUsed{Level="Host",DeviceId="1",Hostname="h",} 20480.0' in page
    assert samples(page, "GPUMemoryUsed") == {"0": 1024.0, "1": 20480.0}
    assert samples(page, "GPUUtilization") == {"1": 37.0}  # device 0's GPU reports [N/A] (MIG)
    assert samples(page, "GPUMemoryUtilization") == {"0": round(100 * 1024 / 81559, 2),
                                                     "1": round(100 * 20480 / 81559, 2)}  # fmt: skip
    filtered = metrics.render(["GPUMemoryUsed"])[0].decode()
    assert "GPUMemoryUsed{" in filtered and "GPUUtilization" not in filtered


def test_no_gpus_no_gauges_and_no_nvidia_smi_run(fake_on_path):
    metrics = ServerMetrics(hostname="h")
    metrics.watch_gpus([])
    page = page_of(metrics)
    assert not any(name in page for name in GPU_FAMILIES) and calls(fake_on_path) == []


def test_a_failing_nvidia_smi_leaves_the_gauges_out(tmp_path, monkeypatch):
    bin_dir = fake_nvidia_smi(tmp_path, fail=True)
    monkeypatch.setenv("PATH", str(bin_dir))
    metrics = ServerMetrics(hostname="h")
    metrics.watch_gpus([A])
    page = page_of(metrics)
    assert "Requests2XX" in page and not any(name in page for name in GPU_FAMILIES)
    assert len(calls(bin_dir)) == 1


def test_sampling_is_cached_for_max_age_seconds():
    runs = []

    def sampler():
        runs.append(1)
        return {A: gpus.GpuUsage(float(len(runs)), 1.0, 2.0)}

    metrics = ServerMetrics(hostname="h")
    metrics.watch_gpus([A], GpuCollector([A], "h", sampler, max_age=3600))
    first, second = page_of(metrics), page_of(metrics)
    assert samples(first, "GPUUtilization") == samples(second, "GPUUtilization") == {"0": 1.0} and len(runs) == 1
    metrics.watch_gpus([A], GpuCollector([A], "h", sampler, max_age=0))  # replaces the first collector
    assert samples(page_of(metrics), "GPUUtilization") == {"0": 2.0}
    assert samples(page_of(metrics), "GPUUtilization") == {"0": 3.0}


def test_a_real_server_reports_the_fake_gpus_and_assigns_them(tmp_path, fake_on_path):
    store = tmp_path / "store"
    store.mkdir()
    recorder_archive(store, "rec", tmp_path / "batches.log")
    # number_of_gpu is given (the default, every visible GPU, is checked in tests/unit/config/test_gpus.py), so
    # the test holds whatever default the test server helper sets; the GPUs' UUIDs still come from `nvidia-smi -L`
    server = ServerProcess(tmp_path / "run", store, "--ncs", "--disable-token-auth", "--models", "rec=rec.mar",
                           number_of_gpu=2).start()  # fmt: skip
    try:
        page = httpx.get(server.metrics + "/metrics", timeout=30).text
        assert samples(page, "GPUMemoryUsed") == {"0": 20480.0, "1": 1024.0}
        assert samples(page, "GPUUtilization") == {"0": 37.0}
        assert re.search(r'^GPUMemoryUsed\{Level="Host",DeviceId="0",Hostname="[^"]+",\} 20480.0$', page, re.M)
        d = httpx.get(server.management + "/models/rec", timeout=30).json()[0]
        assert (d["deviceType"], d["deviceIds"]) == ("gpu", [0, 1])
        assert [w["gpuUsage"] for w in d["workers"]] == ["gpuId::0"]
        r = httpx.post(server.inference + "/predictions/rec", content=b"hello", timeout=30)
        assert r.status_code == 200 and r.json() == {"echo": "hello"}  # the recorder needs no device
    finally:
        server.stop()
    assert "-L" in calls(fake_on_path)
