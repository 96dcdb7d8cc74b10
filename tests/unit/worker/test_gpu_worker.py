"""The worker's GPU side, checked on the CPU: device setup (and its CPU fallback), out-of-memory answers (507, memory
freed, the same worker serves on), CUDA errors that end the worker, and gpu ids handed out round-robin."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import httpx
import pytest

import serve
from serve.archive import package
from serve.batching import InferenceRequest
from serve.errors import PredictionException
from serve.worker import Context, gpu
from serve.worker.process import BatchRunner, batch_error
from serve.worker.protocol import encode_batch, read_message_sync
from tests.integration.server import ServerProcess
from tests.unit.management.models import model_dir, request, run, running

OOM_ONCE_HANDLER = """
import os

def handle(data, context):
    if data is None:
        return None
    marker = "oom-raised"
    if not os.path.exists(marker):
        open(marker, "w").close()
        big = bytearray(1 << 20)  # what the failed batch held: freed before the next one
        raise MemoryError("could not allocate the activations")
    return [{"pid": os.getpid(), "gpu_id": context.system_properties["gpu_id"]} for _ in data]
"""


class CupyOutOfMemory(MemoryError):
    """Stands in for cupy.cuda.memory.OutOfMemoryError (a MemoryError defined in a cupy module)."""


CupyOutOfMemory.__module__ = "cupy.cuda.memory"


class CUDARuntimeError(RuntimeError):
    """Stands in for cupy_backends.cuda.api.runtime.CUDARuntimeError (its text starts with the error's name)."""


@pytest.fixture
def cuda_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """serve.cuda's device functions replaced by recorders, CUDA reported usable with 2 GPUs."""
    calls: list[tuple] = []
    monkeypatch.setattr(serve.cuda, "is_available", lambda: True)
    monkeypatch.setattr(serve.cuda, "device_count", lambda: 2)
    for name in ("set_device", "set_per_process_memory_fraction", "empty_cache"):
        monkeypatch.setattr(serve.cuda, name, lambda *a, _n=name: calls.append((_n, *a)), raising=False)
    return calls


def test_use_gpu_makes_the_device_current_and_caps_the_pool(cuda_calls):
    assert gpu.use_gpu(None, {}) is None and cuda_calls == []
    assert gpu.use_gpu(1, {"gpuMemoryFraction": 0.25}) == "cuda:1"
    assert cuda_calls == [("set_device", 1), ("set_per_process_memory_fraction", 0.25, 1)]
    cuda_calls.clear()
    assert gpu.use_gpu(0, {}) == "cuda:0" and cuda_calls == [("set_device", 0)]


def test_use_gpu_falls_back_to_the_cpu_with_one_warning(cuda_calls, monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, "serve.worker"):
        assert gpu.use_gpu(5, {}) is None
    assert "GPU 5 was assigned to this worker but this process sees 2 GPU(s)" in caplog.text
    monkeypatch.setattr(serve.cuda, "is_available", lambda: False)
    caplog.clear()
    with caplog.at_level(logging.WARNING, "serve.worker"):
        assert gpu.use_gpu(0, {"gpuMemoryFraction": 0.5}) is None
    assert len(caplog.records) == 1 and "CUDA is not usable here" in caplog.text
    assert "running the model on the CPU" in caplog.text and cuda_calls == []


def test_out_of_memory_messages_name_the_memory_the_batch_and_what_to_do():
    cpu = batch_error(MemoryError(), None, 32)
    assert cpu["code"] == 507 and cpu["type"] == "MemoryError"
    assert cpu["message"].startswith("Out of resources: out of host memory while running a batch of 32 (MemoryError)")
    on_gpu = batch_error(CupyOutOfMemory("Out of memory allocating 1,024 bytes"), "cuda:0", 32)
    assert on_gpu["code"] == 507
    message = on_gpu["message"]
    assert "out of GPU memory on cuda:0 while running a batch of 32" in message
    assert "Out of memory allocating 1,024 bytes" in message and "batchSize" in message and "deviceIds" in message
    cublas = batch_error(RuntimeError("CUBLAS_STATUS_ALLOC_FAILED"), "cuda:1", 4)
    assert cublas["code"] == 507 and "out of GPU memory on cuda:1" in cublas["message"]
    host_on_gpu_worker = batch_error(MemoryError("numpy"), "cuda:0", 2)  # numpy's, not CuPy's
    assert "out of host memory" in host_on_gpu_worker["message"]
    bug = batch_error(CUDARuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered"))
    assert bug["code"] == 500 and "cudaErrorIllegalAddress" in bug["message"]


def _run(handle, device: str | None, n: int = 2) -> tuple[BatchRunner, dict]:
    class Handler:
        def handle(self, data, context):
            return handle(data, context)

    channel = io.BytesIO()
    runner = BatchRunner(Handler(), Context("m", ".", None, 4, 0, "0"), channel, 1000, device)
    runner.run(*encode_batch(1, "predict", [InferenceRequest(f"r{i}", {"body": b"x"}) for i in range(n)]))
    channel.seek(0)
    message = read_message_sync(channel, 1 << 20)
    assert message is not None
    return runner, message[0]


def _raise(e: Exception):
    def handle(data, context):
        raise e

    return handle


def test_gpu_out_of_memory_frees_cupys_cache_and_keeps_the_worker(cuda_calls):
    runner, header = _run(_raise(CupyOutOfMemory("Out of memory allocating 4 bytes")), "cuda:0", n=3)
    assert header["error"]["code"] == 507 and "a batch of 3" in header["error"]["message"]
    assert cuda_calls == [("empty_cache",)] and not runner.context_lost
    runner, header = _run(_raise(MemoryError()), None)  # a CPU worker has no CUDA cache to free
    assert header["error"]["code"] == 507 and "out of host memory" in header["error"]["message"]
    assert cuda_calls == [("empty_cache",)]
    runner, header = _run(lambda data, ctx: ["a", "b"], "cuda:0")
    assert header["responses"][0]["status"] == 200 and cuda_calls == [("empty_cache",)]


def test_an_unrecoverable_cuda_error_answers_500_and_ends_the_worker(cuda_calls):
    error = CUDARuntimeError("cudaErrorLaunchFailure: unspecified launch failure")
    runner, header = _run(_raise(error), "cuda:0")
    assert header["error"]["code"] == 500 and runner.context_lost and cuda_calls == []
    runner, _ = _run(_raise(error), None)  # the same text from a CPU worker is only an error
    assert not runner.context_lost


def test_a_real_worker_answers_507_then_serves_the_next_batch(tmp_path: Path):
    root = model_dir(tmp_path, "oom", OOM_ONCE_HANDLER)

    async def scenario():
        async with running(tmp_path) as registry:
            await registry.register(root.name, initial_workers=1)
            with pytest.raises(PredictionException) as failed:
                await registry.submit("oom", None, request("x"))
            assert failed.value.code == 507
            assert "out of host memory while running a batch of 1 (MemoryError: could not allocate" in str(failed.value)
            first_pid = registry.describe("oom")[0]["workers"][0]["pid"]
            answer = await registry.submit("oom", None, request("y"))
            assert answer.status == 200
            assert b'"pid": %d' % first_pid in answer.body  # the same worker process answered

    run(scenario(), timeout=60)


def test_gpu_ids_go_round_robin_and_reach_the_handler(tmp_path: Path, caplog):
    root = model_dir(tmp_path, "g", OOM_ONCE_HANDLER.replace('"oom-raised"', '"."'))  # never raises
    pinned = model_dir(tmp_path, "pinned", OOM_ONCE_HANDLER.replace('"oom-raised"', '"."'),
                       config="deviceIds: [1]\ndtype: float16\n")  # fmt: skip
    on_cpu = model_dir(tmp_path, "cpu", OOM_ONCE_HANDLER.replace('"oom-raised"', '"."'), config="deviceType: cpu\n")

    async def scenario():
        async with running(tmp_path, number_of_gpu=2) as registry:
            await registry.register(root.name, initial_workers=3)
            await registry.register(pinned.name, initial_workers=1)
            await registry.register(on_cpu.name, initial_workers=1)
            workers = registry.describe("g")[0]["workers"]
            assert [w["gpuUsage"] for w in workers] == ["gpuId::0", "gpuId::1", "gpuId::0"]
            assert all(w["gpu"] for w in workers) and registry.describe("g")[0]["deviceType"] == "gpu"
            d = registry.describe("pinned")[0]
            assert (d["deviceIds"], d["dtype"], d["workers"][0]["gpuUsage"]) == ([1], "float16", "gpuId::1")
            answer = await registry.submit("pinned", None, request("x"))
            assert b'"gpu_id": 1' in answer.body  # context.system_properties["gpu_id"]
            d = registry.describe("cpu")[0]
            assert (d["deviceType"], d["workers"][0]["gpuUsage"], d["dtype"]) == ("cpu", "N/A", "float32")
            assert b'"gpu_id": null' in (await registry.submit("cpu", None, request("x"))).body

    with caplog.at_level(logging.INFO, "MODEL_LOG"):
        run(scenario(), timeout=90)
    if not serve.cuda.is_available():
        assert "GPU 1 was assigned to this worker but CUDA is not usable here" in caplog.text


def test_a_real_server_answers_507_over_http_and_keeps_the_worker(tmp_path: Path):
    src, store = tmp_path / "src", tmp_path / "store"
    src.mkdir()
    store.mkdir()
    (src / "oom.py").write_text(OOM_ONCE_HANDLER)
    package("oom", "1.0", f"{src / 'oom.py'}:handle", export_path=store, progress=False)
    server = ServerProcess(tmp_path / "run", store, "--ncs", "--disable-token-auth", "--models", "oom=oom.mar").start()
    try:
        first = httpx.post(server.inference + "/predictions/oom", content=b"x", timeout=30)
        assert first.status_code == 507
        body = first.json()
        assert body["code"] == 507 and "out of host memory while running a batch of 1" in body["message"]
        second = httpx.post(server.inference + "/predictions/oom", content=b"x", timeout=30)
        assert second.status_code == 200
        workers = httpx.get(server.management + "/models/oom", timeout=30).json()[0]["workers"]
        assert [w["pid"] for w in workers] == [second.json()["pid"]] and workers[0]["status"] == "READY"
    finally:
        server.stop()
