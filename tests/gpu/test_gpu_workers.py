"""GPU workers on a real GPU: a server with number_of_gpu=1 against a CPU server in the same run.

- an MLP (Linear, LayerNorm, GELU, softmax: strict fp32 matmuls, no TF32 convolution) answers as on the CPU
  within 1e-4, and its worker ran on cuda:0 (describe: deviceType gpu, gpuUsage gpuId::0; the worker's log);
- the same archive with model-config `dtype: float16` / `bfloat16` answers within 1e-2 of the CPU's float32;
- /metrics has the GPU gauges (when nvidia-smi is on PATH);
- a model capped by `gpuMemoryFraction: 0.01` that asks for 4 GiB answers 507 naming cuda:0, and the same worker
  answers the next request with 200.
Skipped (tests/conftest.py) unless serve.cuda.is_available().
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

import serve
from serve import nn
from serve.archive import package
from serve.config import gpus
from tests.integration.server import ServerProcess

MODEL = """
from serve import nn


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.norm = nn.LayerNorm(64)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(self.act(self.norm(self.fc1(x)))).softmax(dim=-1)
"""

# BaseHandler (JSON lists in, lists out) that allocates 4 GiB on its device when an input value is over 1e6
HANDLER = """
import serve
from handlers.base_handler import BaseHandler


class Hungry(BaseHandler):
    def inference(self, data, *args, **kwargs):
        if float(data.max()) > 1e6:
            serve.zeros(1 << 30, device=self.device)  # 4 GiB of float32
        return super().inference(data, *args, **kwargs)
"""


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.norm = nn.LayerNorm(64)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(64, 10)


def _archives(src: Path, store: Path) -> None:
    src.mkdir(parents=True)
    (src / "model.py").write_text(MODEL)
    (src / "hungry.py").write_text(HANDLER)
    serve.manual_seed(7)
    serve.save(_Mlp().state_dict(), src / "mlp.pt")
    configs = {"mlp": "", "mlp16": "dtype: float16\n", "mlpbf16": "dtype: bfloat16\n",
               "hungry": "gpuMemoryFraction: 0.01\n"}  # fmt: skip
    for name, config in configs.items():
        (src / f"{name}.yaml").write_text(config or "batchSize: 1\n")
        package(name, "1.0", str(src / "hungry.py"), model_file=src / "model.py", serialized_file=src / "mlp.pt",
                config_file=src / f"{name}.yaml", export_path=store, progress=False)  # fmt: skip


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    base = tmp_path_factory.mktemp("gpu_workers")
    store = base / "store"
    store.mkdir()
    _archives(base / "src", store)
    models = [f"{name}={name}.mar" for name in ("mlp", "mlp16", "mlpbf16", "hungry")]
    flags = ("--ncs", "--disable-token-auth", "--models", *models)
    started: dict[str, ServerProcess] = {}
    try:
        started["cpu"] = ServerProcess(base / "cpu", store, *flags, number_of_gpu=0).start()
        started["gpu"] = ServerProcess(base / "gpu", store, *flags, number_of_gpu=1).start()
        yield started
    finally:
        for server in started.values():
            server.stop()


def _inputs() -> list[list[float]]:
    return np.random.default_rng(0).standard_normal((8, 32)).round(4).tolist()


def _predict(server: ServerProcess, model: str, row: list[float]) -> httpx.Response:
    return httpx.post(f"{server.inference}/predictions/{model}", content=json.dumps(row), timeout=60,
                      headers={"content-type": "application/json"})  # fmt: skip


def _answers(server: ServerProcess, model: str) -> np.ndarray:
    out = []
    for row in _inputs():
        r = _predict(server, model, row)
        assert r.status_code == 200, r.text
        out.append(r.json())
    return np.array(out)


def test_gpu_answers_match_the_cpu_within_1e_4(servers):
    cpu, gpu = _answers(servers["cpu"], "mlp"), _answers(servers["gpu"], "mlp")
    assert cpu.shape == (8, 10)
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-6)
    d = httpx.get(servers["gpu"].management + "/models/mlp", timeout=30).json()[0]
    assert (d["deviceType"], d["deviceIds"], d["dtype"]) == ("gpu", [0], "float32")
    assert [(w["gpu"], w["gpuUsage"]) for w in d["workers"]] == [(True, "gpuId::0")]
    assert re.search(r"model mlp loaded in [\d.]+ s on cuda:0", servers["gpu"].log(tail=1 << 20))
    d = httpx.get(servers["cpu"].management + "/models/mlp", timeout=30).json()[0]
    assert (d["deviceType"], d["workers"][0]["gpuUsage"]) == ("cpu", "N/A")


@pytest.mark.parametrize("model, dtype", [("mlp16", "float16"), ("mlpbf16", "bfloat16")])
def test_half_precision_model_configs_work_on_the_gpu(servers, model, dtype):
    cpu = _answers(servers["cpu"], "mlp")
    half = _answers(servers["gpu"], model)
    np.testing.assert_allclose(half, cpu, atol=1e-2)
    d = httpx.get(f"{servers['gpu'].management}/models/{model}", timeout=30).json()[0]
    assert d["dtype"] == dtype and d["workers"][0]["gpuUsage"] == "gpuId::0"


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="nvidia-smi is not on PATH")
def test_metrics_have_the_gpu_gauges(servers):
    visible = gpus.visible_gpus(os.environ)
    usage = gpus.sample() or {}
    if not visible or visible[0].uuid not in usage:
        pytest.skip(f"nvidia-smi reports no memory use for CUDA device 0 ({visible}, {usage})")
    page = httpx.get(servers["gpu"].metrics + "/metrics", timeout=30).text
    for name in ("GPUMemoryUtilization", "GPUMemoryUsed"):
        match = re.search(rf'^{name}\{{Level="Host",DeviceId="0",Hostname="[^"]+",\}} (\S+)$', page, re.M)
        assert match and float(match.group(1)) > 0, name  # the workers' CUDA contexts use memory
    cpu_page = httpx.get(servers["cpu"].metrics + "/metrics", timeout=30).text
    assert "GPUMemoryUsed" not in cpu_page


def test_out_of_gpu_memory_answers_507_and_the_worker_serves_on(servers):
    gpu = servers["gpu"]
    pid = httpx.get(gpu.management + "/models/hungry", timeout=30).json()[0]["workers"][0]["pid"]
    r = _predict(gpu, "hungry", [1e9] * 32)
    assert r.status_code == 507, r.text
    message = r.json()["message"]
    assert "out of GPU memory on cuda:0 while running a batch of 1" in message and "gpuMemoryFraction" in message
    r = _predict(gpu, "hungry", _inputs()[0])
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json(), _answers(servers["cpu"], "mlp")[0], rtol=1e-4, atol=1e-6)
    assert httpx.get(gpu.management + "/models/hungry", timeout=30).json()[0]["workers"][0]["pid"] == pid
