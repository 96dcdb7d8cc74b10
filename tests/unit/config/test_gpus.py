"""The GPUs from nvidia-smi (a fake one on PATH): number_of_gpu's default, CUDA_VISIBLE_DEVICES, the cap, failures."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from serve.config import gpus, load_settings
from tests.unit.config.fake_nvidia_smi import LIST, SAMPLE, UUIDS, calls, fake_nvidia_smi

A, B = UUIDS
MIG_C, MIG_D = "MIG-cccccccc-2222-2222-2222-222222222222", "MIG-dddddddd-3333-3333-3333-333333333333"


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # load_settings looks for ./config.properties


def test_list_parses_gpus_and_their_mig_instances():
    listed = gpus.parse_list(LIST)
    assert [(g.index, g.uuid, g.name) for g in listed] == [(0, A, "NVIDIA H100 80GB HBM3"),
                                                          (1, B, "NVIDIA H100 80GB HBM3")]  # fmt: skip
    assert listed[0].migs == () and listed[1].migs == (MIG_C, MIG_D)
    assert gpus.parse_list("No devices were found\n") == []


@pytest.mark.parametrize(
    "visible, expected",
    [
        (None, [A, B]),
        ("", []),
        ("1", [B]),
        ("1,0", [B, A]),
        ("0, 1", [A, B]),
        ("0,7,1", [A]),  # CUDA stops at the first entry that names no device
        ("-1", []),
        ("GPU-bbbb", [B]),  # a UUID prefix is enough
        ("GPU-", []),
        (f"{MIG_D},{MIG_C}", [B, B]),  # a MIG instance is a device of its own, on its GPU
        ("nonsense,0", []),
    ],
)
def test_cuda_visible_devices_as_cuda_reads_it(visible, expected):
    assert [g.uuid for g in gpus.visible(gpus.parse_list(LIST), visible)] == expected


def test_sample_parses_usage_and_not_available_fields():
    usage = gpus.parse_sample(SAMPLE + "garbage line\nGPU-x, 1, [N/A], 5\n")
    assert set(usage) == {A, B}
    assert usage[A].utilization == 37.0 and usage[A].memory_used_mib == 20480.0
    assert usage[A].memory_percent == pytest.approx(100 * 20480 / 81559)
    assert usage[B].utilization is None and usage[B].memory_used_mib == 1024.0


def test_default_is_every_visible_gpu(tmp_path):
    path = str(fake_nvidia_smi(tmp_path))
    s = load_settings({}, {"PATH": path})
    assert (s.number_of_gpu, s.gpu_uuids) == (2, UUIDS)
    s = load_settings({}, {"PATH": path, "CUDA_VISIBLE_DEVICES": "1"})
    assert (s.number_of_gpu, s.gpu_uuids) == (1, (B,))
    s = load_settings({}, {"PATH": path, "CUDA_VISIBLE_DEVICES": ""})
    assert (s.number_of_gpu, s.gpu_uuids) == (0, ())


def test_configured_number_is_kept_below_and_capped_above_the_visible_gpus(tmp_path, caplog):
    path = str(fake_nvidia_smi(tmp_path))
    s = load_settings({"number_of_gpu": 1}, {"PATH": path})
    assert (s.number_of_gpu, s.gpu_uuids) == (1, (A,))
    s = load_settings({"number_of_gpu": 0}, {"PATH": path})
    assert (s.number_of_gpu, s.gpu_uuids) == (0, ())
    (tmp_path / "config.properties").write_text("number_of_gpu=4\n")
    with caplog.at_level(logging.WARNING, "serve.config"):
        s = load_settings({}, {"PATH": path, "CUDA_VISIBLE_DEVICES": "0"})
    assert (s.number_of_gpu, s.gpu_uuids) == (1, (A,))
    assert "number_of_gpu = 4 is capped to 1: only 1 GPU(s) are visible" in caplog.text
    assert "CUDA_VISIBLE_DEVICES=0" in caplog.text


def test_no_nvidia_smi_means_no_gpus_and_no_error(tmp_path, caplog):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    s = load_settings({}, {"PATH": str(empty)})
    assert (s.number_of_gpu, s.gpu_uuids) == (0, ())
    with caplog.at_level(logging.WARNING, "serve.config"):
        s = load_settings({"number_of_gpu": 2}, {"PATH": str(empty)})
    assert s.number_of_gpu == 2 and s.gpu_uuids == ()  # cannot be checked, so kept as configured
    assert "number_of_gpu = 2 is used unchecked" in caplog.text


def test_a_failing_nvidia_smi_means_no_gpus_with_a_warning(tmp_path, caplog):
    bin_dir = fake_nvidia_smi(tmp_path, fail=True)
    with caplog.at_level(logging.WARNING, "serve.config"):
        s = load_settings({}, {"PATH": str(bin_dir)})
    assert (s.number_of_gpu, s.gpu_uuids) == (0, ())
    assert "failed with exit code 9 (NVIDIA-SMI has failed" in caplog.text
    assert calls(bin_dir) == ["-L"]


def test_a_hanging_nvidia_smi_times_out(tmp_path):
    bin_dir = tmp_path / "slow-bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/sh\nexec sleep 30\n")
    script.chmod(0o755)
    assert gpus.list_gpus(str(bin_dir), timeout=0.3) is None


def test_the_serving_side_never_imports_cupy(tmp_path):
    """Settings, the registry and the metrics page find GPUs through nvidia-smi only: CuPy (and a CUDA context) is
    for the worker processes. Meaningful where CuPy is installed (the GPU machine)."""
    code = (
        "import sys\n"
        "import serve.server, serve.cli.main\n"
        "from serve.config import load_settings\n"
        "from serve.metrics import ServerMetrics\n"
        "s = load_settings({}, {})\n"
        "m = ServerMetrics(); m.watch_gpus(s.gpu_uuids); m.render()\n"
        "print(sorted(k for k in sys.modules if k.split('.')[0] in ('cupy', 'cupy_backends')))\n"
    )
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
