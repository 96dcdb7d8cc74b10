"""The workflow routes in-process, over a fake registry (no workers): how a workflow's nodes are registered with
the spec's settings (TorchServe's WorkflowManager), TorchServe's answers and pagination, several leaves merged into
one JSON object, the model API switch, token authorization on /wfpredict, and an app without workflows."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from serve.archive.war import package_workflow
from serve.batching import InferenceRequest, InferenceResponse
from serve.frontends import DataPlane
from serve.frontends.http import TokenAuth, create_inference_app, create_management_app
from serve.metrics import ServerMetrics
from serve.workflows import WorkflowManager
from tests.unit.frontends.fakes import FakeRegistry, client, settings

SPEC = """models:
    max-workers: 3
    batch-size: 2
    big:
      url: big.mar
      max-batch-delay: 7
dag:
  pre: [big, side]
"""
HANDLER = "def pre(data, context):\n    return data\n\ndef side(data, context):\n    return data\n"


async def answer(request: InferenceRequest) -> InferenceResponse:
    node_input = request.inputs.get("body", b"")
    return InferenceResponse(body=json.dumps({"got": bytes(node_input).decode()}).encode())


def run(tmp_path: Path, test: Any, **overrides: Any) -> FakeRegistry:
    store = tmp_path / "wf_store"
    store.mkdir(exist_ok=True)
    (tmp_path / "wf.yaml").write_text(SPEC)
    (tmp_path / "handler.py").write_text(HANDLER)
    package_workflow("wf", tmp_path / "wf.yaml", handler=tmp_path / "handler.py", export_path=store, force=True)
    config = settings(tmp_path, workflow_store=store, model_store=tmp_path, **overrides)
    registry = FakeRegistry()
    registry.versions |= {f"{wf}__{node}": ["1.0"] for wf in ("wf", "wf2") for node in ("pre", "big", "side")}
    registry.responder = answer
    dataplane = DataPlane(registry, ServerMetrics(hostname="h"), config)
    dataplane.workflows = WorkflowManager(registry, config, submit=dataplane.predict)  # type: ignore[arg-type]
    auth = TokenAuth.from_settings(config)

    async def main() -> None:
        async with (
            client(create_inference_app(dataplane, config, auth)) as inference,
            client(create_management_app(dataplane, config, auth)) as management,
        ):
            await test(inference, management, auth)
        await dataplane.workflows.shutdown()

    asyncio.run(asyncio.wait_for(main(), timeout=30))
    return registry


def test_register_predict_describe_list_unregister(tmp_path: Path) -> None:
    async def test(inference, management, auth) -> None:
        r = await management.post("/workflows", params={"url": "wf.war"})
        assert r.status_code == 200 and r.json() == {
            "status": "Workflow wf has been registered and scaled successfully."
        }
        r = await inference.post("/wfpredict/wf", content=b"hi")
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.json() == {"big": {"got": '{"got": "hi"}'}, "side": {"got": '{"got": "hi"}'}}  # two leaves: merged
        assert (await management.get("/workflows/wf")).json()[0]["workflowDag"] == "{pre=[big, side]}"
        r = await management.post("/workflows", json={"url": "wf.war", "workflow_name": "wf2"})  # a JSON body, as TS
        assert r.status_code == 200, r.text
        page = (await management.get("/workflows", params={"limit": 1})).json()
        assert page == {"nextPageToken": "1", "workflows": [{"workflowName": "wf", "workflowUrl": "wf.war"}]}
        r = await management.delete("/workflows/wf")
        assert r.json() == {"status": 'Workflow "wf" unregistered'}
        assert (await management.get("/workflows/wf")).json()["type"] == "WorkflowNotFoundException"
        r = await management.post("/workflows", params={"url": "missing.war"})
        assert r.status_code == 404 and r.json() == {
            "code": 404,
            "type": "WorkflowNotFoundException",
            "message": "Workflow archive not found at: missing.war",
        }

    registry = run(tmp_path, test, enable_model_api=True)
    registered = {call[2]["model_name"]: call[2] for call in registry.calls if call[0] == "register"}
    big, pre = registered["wf__big"], registered["wf__pre"]
    assert (big["batch_size"], big["max_batch_delay"], big["initial_workers"]) == (2, 7, 1)  # spec, its override
    assert big["local_path"] is None and big["snapshot"] is False
    assert (pre["batch_size"], pre["max_batch_delay"], pre["initial_workers"]) == (1, 0, 1)  # a function node
    assert Path(pre["local_path"]).is_absolute()
    scaled = {call[1]: call[3:6] for call in registry.calls if call[0] == "scale"}
    assert scaled == {"wf__big": (1, 3, True), "wf2__big": (1, 3, True)}  # max-workers 3; functions keep one
    assert {call[1] for call in registry.calls if call[0] == "unregister"} == {"wf__pre", "wf__big", "wf__side"}
    submitted = [call[1] for call in registry.calls if call[0] == "submit"]
    assert submitted[0] == "wf__pre" and sorted(submitted[1:]) == ["wf__big", "wf__side"]


@pytest.mark.parametrize("method,path", [("POST", "/workflows?url=wf.war"), ("DELETE", "/workflows/wf")])
def test_model_api_switch(tmp_path: Path, method: str, path: str) -> None:
    async def test(inference, management, auth) -> None:
        r = await management.request(method, path)
        assert r.status_code == 405 and "--enable-model-api" in r.json()["message"]

    run(tmp_path, test)


def test_wfpredict_needs_the_inference_key(tmp_path: Path) -> None:
    async def test(inference, management, auth) -> None:
        key = {"Authorization": f"Bearer {auth.key('management')}"}
        assert (await management.post("/workflows", params={"url": "wf.war"}, headers=key)).status_code == 200
        assert (await inference.post("/wfpredict/wf", content=b"x")).status_code == 401
        good = {"Authorization": f"Bearer {auth.key('inference')}"}
        assert (await inference.post("/wfpredict/wf", content=b"x", headers=good)).status_code == 200
        assert (await management.get("/workflows")).status_code == 401

    run(tmp_path, test, enable_model_api=True, disable_token_authorization=False)


def test_an_app_without_workflows(tmp_path: Path) -> None:
    config = settings(tmp_path)
    dataplane = DataPlane(FakeRegistry(), ServerMetrics(hostname="h"), config)
    auth = TokenAuth.from_settings(config)

    async def main() -> None:
        async with client(create_management_app(dataplane, config, auth)) as management:
            r = await management.get("/workflows")
            assert r.status_code == 404 and r.json()["type"] == "WorkflowNotFoundException"

    asyncio.run(asyncio.wait_for(main(), timeout=30))
