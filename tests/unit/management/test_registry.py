"""ModelRegistry's management operations against spec section 2: register (archives, URLs, parameters), versions
and the default version, scale, describe, list, unregister with draining, snapshots and startup models."""

from __future__ import annotations

import asyncio
import json
import re
import shutil

import pytest

from serve.archive import package
from serve.errors import ConfigError, InvalidInput, ModelNotFound, ServeError
from serve.management.registry import ModelRegistry
from serve.management.snapshot import latest_snapshot
from serve.metrics import ServerMetrics
from tests.unit.management.models import CONTROL_HANDLER, STARTUP_S, model_dir, request, run, running, settings


def mar(tmp_path, name: str, version: str, config: str | None = None):
    """A .mar in the model store (tmp_path/store) built by serve.archive.package."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "control.py").write_text(CONTROL_HANDLER)
    extra = {}
    if config is not None:
        (src / "config.yaml").write_text(config)
        extra["config_file"] = src / "config.yaml"
    store = tmp_path / "store"
    out = package(name, version, str(src / "control.py"), export_path=store, progress=False, **extra)
    return out.rename(store / f"{name}-{version}.mar")


def code_of(error: ServeError) -> int | None:
    return getattr(error, "code", None)


def test_versions_default_version_and_unregister_rules(tmp_path):
    mar(tmp_path, "m", "1.0")
    mar(tmp_path, "m", "2.0")

    async def scenario():
        async with running(tmp_path / "store") as reg:
            assert await reg.register("m-1.0.mar") == 'Model "m" Version: 1.0 registered with 1 initial workers'
            message = await reg.register("m-2.0.mar", initial_workers=1, synchronous=False)
            assert message == "Processing worker updates..."
            conflict = re.escape("Model version 1.0 is already registered for model m")
            with pytest.raises(InvalidInput, match=conflict) as e:
                await reg.register("m-1.0.mar", initial_workers=0)
            assert code_of(e.value) == 409
            assert [d["modelVersion"] for d in reg.describe("m", all_versions=True)] == ["1.0", "2.0"]
            assert reg.describe("m")[0]["modelVersion"] == "1.0"  # the first registered is the default
            assert json.loads((await reg.submit("m", "2.0", request("ok"))).body)["body"] == "ok"
            with pytest.raises(ModelNotFound, match=re.escape("Model version: 3.0 does not exist for model: m")):
                await reg.submit("m", "3.0", request("ok"))
            with pytest.raises(ModelNotFound, match="Model not found: nope"):
                reg.describe("nope")
            with pytest.raises(InvalidInput, match="Cannot remove default version for model m") as e:
                await reg.unregister("m")
            assert code_of(e.value) == 403
            expected = 'Default version successfully updated for model "m" to "2.0"'
            assert reg.set_default("m", "2.0") == expected
            assert await reg.unregister("m", "1.0") == 'Model "m" unregistered'
            assert reg.list_models() == {"models": [{"modelName": "m", "modelUrl": "m-2.0.mar"}]}
            assert await reg.unregister("m") == 'Model "m" unregistered'
            assert reg.list_models() == {"models": []}

    run(scenario())


def test_scale_up_and_down(tmp_path):
    root = model_dir(tmp_path, "m", CONTROL_HANDLER)

    async def scenario():
        async with running(tmp_path) as reg:
            message = await reg.register(root.name, initial_workers=0)
            assert message == ('Model "m" Version: 1.0 registered with 0 initial workers. Use scale workers API to '
                               "add workers for the model.")  # fmt: skip
            scaled = await reg.scale("m", "1.0", 2, None, synchronous=True)
            assert scaled == "Workers scaled to 2 for model: m, version: 1.0"
            workers = reg.describe("m")[0]["workers"]
            assert [w["status"] for w in workers] == ["READY", "READY"] and len({w["pid"] for w in workers}) == 2
            assert (reg.describe("m")[0]["minWorkers"], reg.describe("m")[0]["maxWorkers"]) == (2, 2)
            with pytest.raises(InvalidInput, match=re.escape("max_worker cannot be less than min_worker.")):
                await reg.scale("m", None, 3, 1)
            assert await reg.scale("m", None, 1, 1) == "Processing worker updates..."
            for _ in range(600):  # 30 s for the worker scaled away to stop, on a loaded machine
                if len(reg.describe("m")[0]["workers"]) == 1:
                    break
                await asyncio.sleep(0.05)
            assert [w["status"] for w in reg.describe("m")[0]["workers"]] == ["READY"]
            assert (await reg.submit("m", None, request("ok"))).status == 200

    run(scenario())


def test_unregister_answers_the_queued_requests_first(tmp_path):
    root = model_dir(tmp_path, "m", CONTROL_HANDLER)

    async def scenario():
        async with running(tmp_path) as reg:
            await reg.register(root.name, initial_workers=1)
            pending = [asyncio.create_task(reg.submit("m", None, request(b))) for b in ("sleep:0.5", "ok", "ok")]
            await asyncio.sleep(0.1)
            assert await reg.unregister("m") == 'Model "m" unregistered'
            assert [p.result().status for p in pending] == [200, 200, 200]  # all answered before unregister returned
            with pytest.raises(ModelNotFound):
                await reg.submit("m", None, request("ok"))

    run(scenario())


def test_register_url_rules(tmp_path):
    store = tmp_path / "store"
    inside = model_dir(store, "m", CONTROL_HANDLER)
    outside = model_dir(tmp_path, "o", CONTROL_HANDLER)

    async def scenario():
        async with running(store) as reg:
            with pytest.raises(ModelNotFound, match=re.escape("Relative path is not allowed in url: ../o-1.0")):
                await reg.register("../o-1.0", initial_workers=0)
            with pytest.raises(ModelNotFound, match=re.escape(f"Given URL {outside} does not match any allowed URL")):
                await reg.register(str(outside), initial_workers=0)
            with pytest.raises(ModelNotFound, match="does not match any allowed URL"):
                await reg.register("https://example.com/m.mar", initial_workers=0)
            with pytest.raises(ModelNotFound, match=re.escape("Model not found at: missing.mar")):
                await reg.register("missing.mar", initial_workers=0)
            with pytest.raises(InvalidInput, match="Invalid RuntimeType value: java"):
                await reg.register(inside.name, runtime="java")
            with pytest.raises(InvalidInput, match="Invalid batch_size value: 0"):
                await reg.register(inside.name, batch_size=0)
            assert "registered" in await reg.register(f"file://{inside}", initial_workers=0)  # inside the store
        async with running(store, allowed_urls=(f"file://{tmp_path}/.*",)) as allowed:
            assert "registered" in await allowed.register(str(outside), model_name="renamed", initial_workers=0)
            assert allowed.describe("renamed")[0]["modelUrl"] == str(outside)

    run(scenario())


def test_settings_priority_models_property_then_yaml_then_parameters(tmp_path):
    root = model_dir(tmp_path, "m", CONTROL_HANDLER, config="batchSize: 4\nmaxBatchDelay: 7\nresponseTimeout: 9\n")
    models = {"m": {"1.0": {"batchSize": 2, "maxBatchDelay": 3, "responseTimeout": 5, "startupTimeout": 11}}}

    async def scenario():
        async with running(tmp_path, models=models) as reg:
            await reg.register(root.name, batch_size=8, initial_workers=0)
            d = reg.describe("m")[0]
            assert (d["batchSize"], d["maxBatchDelay"], d["responseTimeout"], d["startupTimeout"]) == (8, 7, 9, 11)
            assert (d["minWorkers"], d["maxWorkers"], d["loadedAtStartup"], d["deviceType"]) == (0, 0, False, "cpu")

    run(scenario())


def test_list_pages(tmp_path):
    for name in ("c", "a", "b"):
        model_dir(tmp_path, name, CONTROL_HANDLER)

    async def scenario():
        async with running(tmp_path) as reg:
            for name in ("c", "a", "b"):
                await reg.register(f"{name}-1.0", initial_workers=0)
            page = reg.list_models(limit=2)
            assert page == {"nextPageToken": "2", "models": [{"modelName": "a", "modelUrl": "a-1.0"},
                                                             {"modelName": "b", "modelUrl": "b-1.0"}]}  # fmt: skip
            assert reg.list_models(limit=2, next_page_token=2) == {"models": [{"modelName": "c", "modelUrl": "c-1.0"}]}
            assert len(reg.list_models(limit=500)["models"]) == 3  # over 100 means 100
            for past in (3, 4, 2**31):  # past the last model: an empty page, whatever the token
                assert reg.list_models(next_page_token=past) == {"models": []}

    run(scenario())


def test_snapshots_are_written_on_change_and_restored_on_start(tmp_path):
    root = model_dir(tmp_path, "m", CONTROL_HANDLER)
    snapshots = tmp_path / "snapshots"

    async def scenario():
        async with running(tmp_path, ncs=False, snapshot_dir=snapshots) as reg:
            await reg.register(root.name, initial_workers=0, batch_size=3)
            saved = latest_snapshot(snapshots)
            assert saved is not None and saved["modelCount"] == 1
            assert saved["models"]["m"]["1.0"] == {
                "defaultVersion": True, "marName": root.name, "minWorkers": 0, "maxWorkers": 0, "batchSize": 3,
                "maxBatchDelay": 100, "responseTimeout": 120, "startupTimeout": STARTUP_S,
            }  # fmt: skip
        async with running(tmp_path, model_snapshot=saved, load_models=("other",)) as restored:
            d = restored.describe("m")[0]
            assert (d["batchSize"], d["minWorkers"], d["loadedAtStartup"]) == (3, 0, True)

    run(scenario())


def test_startup_snapshot_and_shutdown_files_as_torchserve_writes_them(tmp_path):
    root = model_dir(tmp_path, "m", CONTROL_HANDLER)
    snapshots = tmp_path / "snapshots"

    def kinds() -> list[str]:
        return [p.name.split("-", 1)[1] for p in sorted(snapshots.iterdir()) if p.name.endswith(".cfg")]

    async def scenario():
        async with running(tmp_path, ncs=False, snapshot_dir=snapshots) as reg:
            assert kinds() == ["startup.cfg"]
            await reg.register(root.name, initial_workers=0)
            assert kinds() == ["startup.cfg", "snapshot.cfg"]
        assert kinds() == ["startup.cfg", "snapshot.cfg", "shutdown.cfg"]
        saved = latest_snapshot(snapshots)  # the shutdown file: it holds the model
        assert saved is not None and saved["name"].endswith("-shutdown.cfg") and list(saved["models"]) == ["m"]

    run(scenario())


def test_a_snapshot_whose_archive_is_gone_refuses_to_start(tmp_path):
    root = model_dir(tmp_path, "m", CONTROL_HANDLER)
    snapshots = tmp_path / "snapshots"

    async def scenario():
        async with running(tmp_path, ncs=False, snapshot_dir=snapshots) as reg:
            await reg.register(root.name, initial_workers=0)
        saved = latest_snapshot(snapshots)  # the shutdown file
        shutil.rmtree(root)
        restored = ModelRegistry(settings(tmp_path, model_snapshot=saved, snapshot_dir=snapshots), ServerMetrics())
        try:
            with pytest.raises(ConfigError, match=r"registers model\(s\) whose archive is gone: m .*--ncs"):
                await restored.start()
            assert restored.list_models()["models"] == []
        finally:
            await restored.shutdown(10)
        assert latest_snapshot(snapshots) == saved  # no startup or shutdown file forgot the model

    run(scenario())


def test_a_startup_model_that_cannot_be_registered_refuses_the_start(tmp_path):
    """A missing archive and a refused model-config key: one ConfigError naming both, never healthy, and no
    startup snapshot that would restore the server without them."""
    model_dir(tmp_path, "good", CONTROL_HANDLER)
    model_dir(tmp_path, "stateful", CONTROL_HANDLER, config="useJobTicket: true\n")
    snapshots = tmp_path / "snapshots"
    load = ("good-1.0", "gone=missing.mar", "stateful-1.0")

    async def scenario():
        registry = ModelRegistry(settings(tmp_path, load_models=load, ncs=False, snapshot_dir=snapshots),
                                 ServerMetrics())  # fmt: skip
        try:
            with pytest.raises(ConfigError) as refused:
                await registry.start()
            message = str(refused.value)
            assert message.startswith("startup model(s) could not be registered: gone (missing.mar): ")
            assert "; stateful-1.0: " in message and "useJobTicket" in message and "good" not in message
            healthy, details = registry.health()
            assert not healthy and "gone (missing.mar)" in details["status"]
        finally:
            await registry.shutdown(10)
        assert latest_snapshot(snapshots) is None

    run(scenario())


def test_start_loads_all_models_of_the_store(tmp_path):
    model_dir(tmp_path, "a", CONTROL_HANDLER)
    model_dir(tmp_path, "b", CONTROL_HANDLER)
    (tmp_path / ".hidden.mar").write_text("not an archive")

    async def scenario():
        async with running(tmp_path, load_models=("all",), default_workers_per_model=0) as reg:
            assert [m["modelName"] for m in reg.list_models()["models"]] == ["a", "b"]

    run(scenario())


def test_not_ready_until_the_startup_models_have_loaded(tmp_path):
    async def scenario() -> None:
        registry = ModelRegistry(settings(tmp_path), ServerMetrics())
        try:
            healthy, details = registry.health()
            assert not healthy and details["status"].startswith("Starting")
            await registry.start()
            assert registry.health() == (True, {})
        finally:
            await registry.shutdown(10)

    run(scenario())
