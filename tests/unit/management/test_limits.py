"""Worker caps (serve/management/limits.py) and the pool's bounded start rate (serve/management/workers.py).

Caps are tiny here (max_workers_per_model=2, max_workers=3), so no test forks more than three worker processes;
the start-rate test forks none (the pool's process start is replaced by a fake that only counts).
"""

from __future__ import annotations

import asyncio
import itertools
import re
from pathlib import Path

import pytest

from serve.batching import Batcher, JobQueue
from serve.config import Settings, load_settings
from serve.errors import ConfigError, InvalidInput, ModelNotFound
from serve.management import workers as workers_module
from serve.management.batch_loop import BatchLoop
from serve.management.limits import check_worker_counts, workers_after
from serve.management.worker_process import READY, WorkerSpec
from serve.management.worker_slot import PoolSettings, WorkerSlot
from serve.management.workers import START_CONCURRENCY, WorkerPool
from serve.metrics import ServerMetrics
from tests.unit.management.models import CONTROL_HANDLER, model_dir, run, running

CAPS = {"max_workers_per_model": 2, "max_workers": 3}
TINY = Settings(max_workers_per_model=2, max_workers=3)


def test_settings_default_caps_follow_the_usable_cpus():
    from serve.config.settings import usable_cpus

    assert (Settings().max_workers_per_model, Settings().max_workers) == (2 * usable_cpus(), 4 * usable_cpus())


def test_caps_come_from_the_file_the_environment_and_the_command_line(tmp_path):
    config = tmp_path / "config.properties"
    config.write_text("max_workers_per_model=3\nmax_workers=5\nenable_envvars_config=true\n")
    from_file = load_settings({"ts_config": str(config), "ncs": True}, {})
    assert (from_file.max_workers_per_model, from_file.max_workers) == (3, 5)
    env = {"TS_MAX_WORKERS": "7", "LOG_LOCATION": str(tmp_path)}
    later = load_settings({"ts_config": str(config), "ncs": True, "max_workers_per_model": 1}, env)
    assert (later.max_workers_per_model, later.max_workers) == (1, 7)
    config.write_text("max_workers=0\n")
    with pytest.raises(ConfigError, match=r"max_workers = '0' is not valid: expected an integer >= 1"):
        load_settings({"ts_config": str(config), "ncs": True}, {})


def test_workers_after_a_scale():
    assert workers_after(current=0, low=2, high=2) == 2
    assert workers_after(current=5, low=1, high=3) == 3
    assert workers_after(current=2, low=1, high=3) == 2


def test_over_the_per_model_cap_names_the_cap_its_key_and_the_workers_now():
    with pytest.raises(InvalidInput) as e:
        check_worker_counts(TINY, "model m version 1.0", ("min_worker", 100000), ("max_worker", 100000), 1, 0)
    assert str(e.value) == ("min_worker 100000 exceeds max_workers_per_model 2 (config key max_workers_per_model); "
                            "model m version 1.0 has 1 worker(s) now, all models 1")  # fmt: skip
    with pytest.raises(InvalidInput, match=r"^maxWorkers 3 exceeds max_workers_per_model 2 "):
        check_worker_counts(TINY, "model m version 1.0", ("minWorkers", 1), ("maxWorkers", 3), 0, 0)


def test_over_the_total_cap_counts_every_version_and_replaces_this_ones_count():
    check_worker_counts(TINY, "model m version 1.0", ("min_worker", 2), ("max_worker", 2), 0, 1)  # 1 + 2 = 3
    check_worker_counts(TINY, "model m version 1.0", ("min_worker", 2), ("max_worker", 2), 2, 1)  # 2 replaces 2
    check_worker_counts(TINY, "model m version 1.0", ("min_worker", 0), ("max_worker", 0), 2, 3)  # scaling down
    with pytest.raises(InvalidInput) as e:
        check_worker_counts(TINY, "model n version 2.0", ("initial_workers", 2), ("initial_workers", 2), 0, 2)
    expected = "initial_workers 2 would bring the workers of all models to 4, over max_workers 3 (config key "
    assert str(e.value) == expected + "max_workers); model n version 2.0 has 0 worker(s) now, all models 2"


@pytest.mark.parametrize("low, high", [(-1, 1), (1, -5)])
def test_negative_counts_are_refused(low, high):
    with pytest.raises(InvalidInput, match=r"Invalid m(in|ax)_worker value: -\d; it must be an integer >= 0"):
        check_worker_counts(TINY, "model m version 1.0", ("min_worker", low), ("max_worker", high), 0, 0)


def test_registry_refuses_register_scale_and_model_config_over_the_caps(tmp_path):
    model_dir(tmp_path, "m", CONTROL_HANDLER)
    model_dir(tmp_path, "n", CONTROL_HANDLER)
    model_dir(tmp_path, "big", CONTROL_HANDLER, config="minWorkers: 3\nmaxWorkers: 3\n")

    async def scenario():
        async with running(tmp_path, **CAPS) as reg:
            with pytest.raises(InvalidInput, match=r"^initial_workers 3 exceeds max_workers_per_model 2 \(config "):
                await reg.register("m-1.0", initial_workers=3)
            with pytest.raises(InvalidInput, match=r"^minWorkers 3 exceeds max_workers_per_model 2 "):
                await reg.register("big-1.0")
            for name in ("m", "big"):  # refused registrations leave nothing behind
                with pytest.raises(ModelNotFound):
                    reg.describe(name)
            await reg.register("m-1.0", initial_workers=2)
            await reg.register("n-1.0", initial_workers=1)
            over_total = "min_worker 2 would bring the workers of all models to 4, over max_workers 3 (config key "
            over_total += "max_workers); model n version 1.0 has 1 worker(s) now, all models 3"
            with pytest.raises(InvalidInput, match=re.escape(over_total)):
                await reg.scale("n", None, 2, None)
            with pytest.raises(InvalidInput, match=r"^min_worker 100000 exceeds max_workers_per_model 2 .*has 2 work"):
                await reg.scale("m", None, 100000, None)
            with pytest.raises(InvalidInput, match=r"^Invalid min_worker value: -1"):
                await reg.scale("m", None, -1, None)
            assert [len(reg.describe(n)[0]["workers"]) for n in ("m", "n")] == [2, 1]  # nothing was started
            await reg.scale("m", None, 1, None)  # m's count is replaced: 1 + 2 = 3 fits
            assert await reg.scale("n", None, 2, None, synchronous=True) == "Workers scaled to 2 for model: n"

    run(scenario(), timeout=60)


def _pool(tmp_path: Path) -> WorkerPool:
    spec = WorkerSpec("m", "1.0", tmp_path, None, 1, 10, 1 << 20, 1 << 20)
    queue = JobQueue(10)
    ids = itertools.count(9000)
    return WorkerPool(spec, queue, Batcher(queue, 1, 0), ServerMetrics(), PoolSettings(5), lambda: str(next(ids)))


def test_a_big_scale_up_starts_a_few_workers_at_a_time(tmp_path, monkeypatch):
    starting, most = 0, 0

    async def fake_start(self: WorkerPool, slot: WorkerSlot) -> None:
        nonlocal starting, most
        starting += 1
        most = max(most, starting)
        await asyncio.sleep(0.02)  # forking and loading the model
        starting -= 1
        slot.state = READY
        slot.first_load(None)

    async def fake_serve(self: BatchLoop, slot: WorkerSlot) -> None:
        await slot.wait(asyncio.get_running_loop().create_future())  # until scaled away

    monkeypatch.setattr(WorkerPool, "_start_now", fake_start)
    monkeypatch.setattr(BatchLoop, "serve", fake_serve)
    assert 1 < START_CONCURRENCY <= 8
    assert workers_module.START_CONCURRENCY == START_CONCURRENCY

    async def scenario():
        pool = _pool(tmp_path)
        started = pool.scale(20, 20)
        await asyncio.sleep(0)
        assert sum(s.state == READY for s in pool.slots) == 0
        assert await pool.wait_ready(started, 10)
        assert pool.live == 20 and most == START_CONCURRENCY
        await pool.stop(5)

    run(scenario())


def test_workers_scaled_away_while_waiting_to_start_are_never_started(tmp_path, monkeypatch):
    calls = 0

    async def fake_start(self: WorkerPool, slot: WorkerSlot) -> None:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        slot.state = READY
        slot.first_load(None)

    async def fake_serve(self: BatchLoop, slot: WorkerSlot) -> None:
        await slot.wait(asyncio.get_running_loop().create_future())

    monkeypatch.setattr(WorkerPool, "_start_now", fake_start)
    monkeypatch.setattr(BatchLoop, "serve", fake_serve)

    async def scenario():
        pool = _pool(tmp_path)
        pool.scale(12, 12)
        await asyncio.sleep(0.01)  # the first START_CONCURRENCY are starting, the rest wait their turn
        pool.scale(0, 0)
        await pool.stop(5)
        assert calls == START_CONCURRENCY and pool.slots == []

    run(scenario())
