"""Worker processes and batching end to end, through ModelRegistry.submit, on real worker processes (spec section 9).

Each test runs one scenario on a fresh event loop with a few workers of the CONTROL_HANDLER model (models.py).
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from serve.errors import (
    InvalidModel,
    ModelLoadError,
    ModelNotFound,
    ModelNotReady,
    PredictionException,
    QueueFull,
    RequestTimeout,
    WorkerError,
)
from tests.unit.management.models import (
    CONTROL_HANDLER,
    DESCRIBE_HANDLER,
    LOAD_ERROR_HANDLER,
    STREAM_HANDLER,
    batch_sizes,
    model_dir,
    request,
    run,
    running,
)


def test_batches_form_under_load_and_a_lone_request_is_not_held(tmp_path):
    root = model_dir(tmp_path, "m", CONTROL_HANDLER, config="batchSize: 4\nmaxBatchDelay: 30000\n")

    async def scenario():
        async with running(tmp_path) as reg:
            await reg.register(root.name, initial_workers=1)
            for i in range(3):  # concurrency 1: dispatched at once, not after the 30 s delay (on any machine)
                started = time.monotonic()
                response = await reg.submit("m", None, request(f"ok{i}"))
                assert response.status == 200 and time.monotonic() - started < 15
            answers = await asyncio.gather(*(reg.submit("m", None, request(f"ok{i}")) for i in range(8)))
            assert [a.status for a in answers] == [200] * 8
            page = reg.metrics.render()[0].decode()
            assert re.search(r'ts_batch_size_count\{[^}]*model_name="m"[^}]*\} 5\.0', page)  # 5 batches, 11 requests
            assert re.search(r"ts_batch_size_sum\{[^}]*\} 11\.0", page)
            assert re.search(r'ts_queue_latency_microseconds\{[^}]*model_name="m"[^}]*\} [1-9]', page)

    run(scenario())
    assert batch_sizes(root) == [1, 1, 1, 4, 4]


def test_queue_full_is_refused_at_once(tmp_path):
    root = model_dir(tmp_path, "m", CONTROL_HANDLER, config="jobQueueSize: 2\n")

    async def scenario():
        async with running(tmp_path) as reg:
            await reg.register(root.name, initial_workers=1)
            busy = asyncio.create_task(reg.submit("m", None, request("sleep:5")))
            while not batch_sizes(root):  # until the worker took it and the queue is empty again
                await asyncio.sleep(0.01)
            queued = [asyncio.create_task(reg.submit("m", None, request("ok"))) for _ in range(2)]
            await asyncio.sleep(0)
            refused = reg.submit("m", None, request("ok"))
            with pytest.raises(QueueFull, match="job queue is full"):
                refused.send(None)  # at once: it fails before it ever waits
            assert reg.describe("m")[0]["jobQueueStatus"] == {"remainingCapacity": 0, "pendingRequests": 2}
            assert [r.status for r in await asyncio.gather(busy, *queued)] == [200, 200, 200]

    run(scenario())


def test_handler_failures_answer_the_batch_and_the_worker_lives_on(tmp_path):
    root = model_dir(tmp_path, "m", CONTROL_HANDLER)

    async def scenario():
        async with running(tmp_path) as reg:
            await reg.register(root.name, initial_workers=1)
            pid = reg.describe("m")[0]["workers"][0]["pid"]
            with pytest.raises(PredictionException, match="Prediction failed: ValueError: the handler broke") as e:
                await reg.submit("m", None, request("raise"))
            assert e.value.code == 503  # TorchServe's status for a handler exception
            with pytest.raises(PredictionException, match="custom failure") as e:
                await reg.submit("m", None, request("predict_error"))
            assert e.value.code == 599
            with pytest.raises(PredictionException, match="returned 2 results for 1 requests") as e:
                await reg.submit("m", None, request("wrong_count"))
            assert e.value.code == 503
            teapot = await reg.submit("m", None, request("teapot"))
            assert (teapot.status, teapot.headers) == (418, {"x-teapot": "yes"})
            assert teapot.content_type == "application/json"
            assert b'"body": "teapot"' in teapot.body
            assert reg.describe("m")[0]["workers"][0]["pid"] == pid

    run(scenario())


def test_worker_death_mid_batch_errors_then_the_worker_restarts(tmp_path):
    root = model_dir(tmp_path, "m", CONTROL_HANDLER, config="batchSize: 2\nmaxBatchDelay: 500\n")

    async def scenario():
        async with running(tmp_path) as reg:
            await reg.register(root.name, initial_workers=1)
            first_pid = reg.describe("m")[0]["workers"][0]["pid"]
            results = await asyncio.gather(reg.submit("m", None, request("exit")), reg.submit("m", None, request("ok")),
                                           return_exceptions=True)  # fmt: skip
            for r in results:  # both requests of the dying batch are answered, neither hangs
                assert isinstance(r, WorkerError) and "Worker died" in str(r) and "exit code 3" in str(r)
            response = await reg.submit("m", None, request("ok"))  # queued until the restarted worker is ready
            assert response.status == 200
            worker = reg.describe("m")[0]["workers"][0]
            assert worker["status"] == "READY" and worker["pid"] != first_pid and "exit code 3" in worker["lastError"]
            assert reg.health()[0]

    run(scenario())


def test_response_timeout_fails_the_batch_and_recycles_the_worker(tmp_path):
    root = model_dir(tmp_path, "m", CONTROL_HANDLER, config="responseTimeout: 1\n")

    async def scenario():
        async with running(tmp_path) as reg:
            await reg.register(root.name, initial_workers=1)
            first_pid = reg.describe("m")[0]["workers"][0]["pid"]
            started = time.monotonic()
            with pytest.raises(RequestTimeout, match="response_timeout=1s"):
                await reg.submit("m", None, request("sleep:30"))
            assert time.monotonic() - started < 15  # the timeout, not the handler's 30 s
            assert (await reg.submit("m", None, request("ok"))).status == 200
            assert reg.describe("m")[0]["workers"][0]["pid"] != first_pid

    run(scenario())


def test_a_worker_that_keeps_failing_gives_up_and_health_turns_false(tmp_path):
    root = model_dir(tmp_path, "m", CONTROL_HANDLER, config="maxRetryTimeoutInSec: 0\n")

    async def scenario():
        async with running(tmp_path) as reg:
            await reg.register(root.name, initial_workers=1)
            assert reg.health() == (True, {"m": {"1.0": {"status": "Healthy", "liveWorkers": 1, "minWorkers": 1}}})
            with pytest.raises(WorkerError):
                await reg.submit("m", None, request("exit"))
            for _ in range(600):  # the slot gives up at once (no retry window); 30 s for a loaded machine
                if reg.describe("m")[0]["workers"][0]["status"] == "FAILED":
                    break
                await asyncio.sleep(0.05)
            assert reg.health()[0] is False
            with pytest.raises(ModelNotReady, match="has no worker to serve inference request"):
                await reg.submit("m", None, request("ok"))
            assert await reg.scale("m", None, 1, 1, synchronous=True) == "Workers scaled to 1 for model: m"
            assert reg.health()[0] and (await reg.submit("m", None, request("ok"))).status == 200

    run(scenario())


def test_load_errors_carry_the_handler_error_and_the_model_is_not_kept(tmp_path):
    bad = model_dir(tmp_path, "bad", LOAD_ERROR_HANDLER)
    dying = model_dir(tmp_path, "dying", "import os\nos._exit(7)\n")

    async def scenario():
        async with running(tmp_path) as reg:
            with pytest.raises(ModelLoadError) as e:
                await reg.register(bad.name, initial_workers=1)
            text = str(e.value)
            assert "Failed to start workers for model bad version: 1.0" in text
            assert "FileNotFoundError: weights missing: model.pt is not in the archive" in text
            assert "handler.py" in text and "Worker died" not in text  # the traceback's frames
            with pytest.raises(ModelNotFound):
                reg.describe("bad")
            with pytest.raises(ModelLoadError, match="exited with exit code 7 while loading"):
                await reg.register(dying.name, initial_workers=1)

    run(scenario())


def test_streamed_results_and_customized_describe(tmp_path):
    stream = model_dir(tmp_path, "stream", STREAM_HANDLER)
    described = model_dir(tmp_path, "described", DESCRIBE_HANDLER)

    async def scenario():
        async with running(tmp_path) as reg:
            await reg.register(stream.name, initial_workers=1)
            response = await reg.submit("stream", None, request("x"))
            assert response.status == 200 and response.chunks is not None
            assert [c async for c in response.chunks] == [b"part0;", b"part1;", b"part2;"]
            await reg.register(described.name, initial_workers=1)
            [entry] = await reg.describe_custom("described", None)
            assert entry["modelName"] == "described" and entry["customizedMetadata"] == {"labels": ["cat", "dog"]}

    run(scenario())


# loads a file of the archive that is no checkpoint; WRAP: raises its own error from the CheckpointError
REFUSED_CHECKPOINT_HANDLER = """
import os
import serve


def handle(data, context):
    if data is None:
        path = os.path.join(context.system_properties["model_dir"], "weights.pt")
        with open(path, "wb") as f:
            f.write(b"not a checkpoint at all")
        try:
            serve.load(path)
        except Exception as e:
            if WRAP:
                raise ValueError("cannot read the weights") from e
            raise
    return data
"""


@pytest.mark.parametrize("wrap", [False, True])
def test_a_refused_checkpoint_is_an_invalid_model_naming_the_file_without_a_traceback(tmp_path, wrap):
    root = model_dir(tmp_path, "refused", REFUSED_CHECKPOINT_HANDLER.replace("WRAP", str(wrap)))

    async def scenario():
        async with running(tmp_path) as reg:
            with pytest.raises(InvalidModel) as e:
                await reg.register(root.name, initial_workers=1)
            text = str(e.value)
            assert "Failed to start workers for model refused version: 1.0" in text
            assert "weights.pt: not a checkpoint format serve reads" in text
            assert ("ValueError: cannot read the weights (CheckpointError: weights.pt" in text) is wrap
            assert "Traceback" not in text
            with pytest.raises(ModelNotFound):
                reg.describe("refused")

    run(scenario())
