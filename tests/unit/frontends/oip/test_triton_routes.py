"""Triton's REST extensions (routers/triton.py) on the in-process app with a fake registry: statistics on all three
routes, load/unload guarded by the management key and --enable-model-api, load mapped onto register with the
store's archive and a config override, and their refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.unit.frontends.fakes import FakeRegistry, run


class Registering(FakeRegistry):
    """The fake, where a register adds the model (version 1.0), as the real registry does."""

    async def register(self, url: str, **options: Any) -> str:
        self.versions[options["model_name"]] = ["1.0"]
        return await super().register(url, **options)


STATS_KEYS = {"name", "version", "last_inference", "inference_count", "execution_count", "inference_stats",
              "batch_stats"}  # fmt: skip


def test_statistics_of_every_version_one_model_and_one_version(tmp_path: Path) -> None:
    async def check(s):
        every = (await s.inference.get("/v2/models/stats")).json()["model_stats"]
        assert sorted((m["name"], m["version"]) for m in every) == [("bert", "1.0"), ("mnist", "1.0"), ("mnist", "2.0")]
        assert all(m.keys() == STATS_KEYS and m["inference_count"] == 0 for m in every)
        mnist = (await s.inference.get("/v2/models/mnist/stats")).json()["model_stats"]
        assert [m["version"] for m in mnist] == ["1.0", "2.0"]
        one = (await s.inference.get("/v2/models/mnist/versions/2.0/stats")).json()["model_stats"]
        assert [m["version"] for m in one] == ["2.0"]
        r = await s.inference.get("/v2/models/nope/stats")
        assert r.status_code == 404 and "nope" in r.json()["error"]

    run(check, tmp_path)


def test_load_and_unload_need_the_model_api(tmp_path: Path) -> None:
    async def check(s):
        for action in ("load", "unload"):
            r = await s.inference.post(f"/v2/repository/models/mnist/{action}")
            assert r.status_code == 405 and "--enable-model-api" in r.json()["error"], r.text
        assert not [c for c in s.registry.calls if c[0] in ("register", "unregister")]

    run(check, tmp_path)


def test_load_and_unload_take_the_management_key(tmp_path: Path) -> None:
    async def check(s):
        inference = {"Authorization": f"Bearer {s.auth.key('inference')}"}
        r = await s.inference.post("/v2/repository/models/mnist/unload", headers=inference)
        assert r.status_code == 401
        stats = await s.inference.get("/v2/models/stats", headers=inference)
        assert stats.status_code == 200
        management = {"Authorization": f"Bearer {s.auth.key('management')}"}
        r = await s.inference.post("/v2/repository/models/mnist/unload", headers=management)
        assert r.status_code == 200 and r.content == b""
        assert [c for c in s.registry.calls if c[0] == "unregister"] == [("unregister", "mnist", "1.0"),
                                                                         ("unregister", "mnist", "2.0")]  # fmt: skip

    run(check, tmp_path, disable_token_authorization=False, enable_model_api=True)


def test_load_registers_the_stores_archive_with_the_override(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "resnet.mar").write_bytes(b"")

    async def check(s):
        unloaded = {"name": "resnet", "version": "", "state": "UNAVAILABLE", "reason": "unloaded"}
        assert unloaded in (await s.inference.post("/v2/repository/index")).json()
        body = {"parameters": {"config": '{"max_batch_size": "16", "dynamic_batching": '
                                         '{"max_queue_delay_microseconds": 1500}}'}}  # fmt: skip
        r = await s.inference.post("/v2/repository/models/resnet/load", json=body)
        assert r.status_code == 200, r.text
        (call,) = [c for c in s.registry.calls if c[0] == "register"]
        assert call[1] == "resnet.mar" and call[2]["model_name"] == "resnet"
        assert call[2]["batch_size"] == 16 and call[2]["max_batch_delay"] == 2  # 1.5 ms, rounded up
        r = await s.inference.post("/v2/repository/models/nothere/load")
        assert r.status_code == 404 and r.json()["error"].startswith("failed to load 'nothere'")
        r = await s.inference.post("/v2/repository/models/resnet/load", json={"parameters": {"config": "{"}})
        assert r.status_code == 400 and "not JSON" in r.json()["error"]
        r = await s.inference.post("/v2/repository/models/resnet/load", json={"parameters": []})
        assert r.status_code == 400
        index = (await s.inference.post("/v2/repository/index")).json()
        assert [m for m in index if m["name"] == "resnet"] == [
            {"name": "resnet", "version": "1.0", "state": "UNAVAILABLE", "reason": index[-1]["reason"]}
        ]

    run(check, tmp_path, Registering(), enable_model_api=True, model_store=store)
