"""The management app in-process: register, list, describe, scale, set-default, unregister, and their errors."""

from __future__ import annotations

import pytest

from tests.unit.frontends.fakes import FakeRegistry, Server, run


def _last(server: Server, kind: str) -> tuple:
    calls = [c for c in server.registry.calls if c[0] == kind]
    assert calls, f"the registry's {kind} was not called"
    return calls[-1]


def test_model_api_disabled_is_405_for_register_and_unregister_only(tmp_path):
    async def check(server: Server) -> None:
        for r in (
            await server.management.post("/models?url=mnist.mar"),
            await server.management.delete("/models/mnist"),
        ):
            assert r.status_code == 405
            body = r.json()
            assert body["type"] == "MethodNotAllowedException" and "--enable-model-api" in body["message"]
            # TorchServe's own words first (its test_model_control_mode.py message; its gRPC "Model API disabled")
            assert body["message"].startswith("Requested method is not allowed, please refer to API document.")
            assert "Model API disabled" in body["message"]
        assert not [c for c in server.registry.calls if c[0] in ("register", "unregister")]
        assert (await server.management.get("/models")).status_code == 200
        assert (await server.management.put("/models/mnist?min_worker=1")).status_code == 200

    run(check, tmp_path)


def test_register_query_parameters_are_typed(tmp_path):
    async def check(server: Server) -> None:
        query = (
            "url=mnist.mar&model_name=digits&handler=image_classifier&runtime=python&batch_size=8"
            "&max_batch_delay=5&initial_workers=2&synchronous=false&response_timeout=30&startup_timeout=60"
        )
        r = await server.management.post(f"/models?{query}")
        assert (r.status_code, r.text) == (200, '{\n  "status": "ok"\n}\n')
        _, url, options = _last(server, "register")
        assert url == "mnist.mar"
        assert options == {"model_name": "digits", "handler": "image_classifier", "runtime": "python",
                           "batch_size": 8, "max_batch_delay": 5, "initial_workers": 2, "synchronous": False,
                           "response_timeout": 30, "startup_timeout": 60}  # fmt: skip
        await server.management.post("/models?url=mnist.mar")
        assert _last(server, "register")[2]["synchronous"] is True  # REST default, as in TorchServe
        assert _last(server, "register")[2]["batch_size"] is None  # unset: the registry applies the defaults
        assert (await server.management.post("/models?url=mnist.mar&runtime=")).status_code == 200
        assert _last(server, "register")[2]["runtime"] is None  # empty: unset, the archive's runtime

    run(check, tmp_path, enable_model_api=True)


def test_register_json_body_is_lenient_like_gson(tmp_path):
    async def check(server: Server) -> None:
        body = {"url": "bert.mar", "batch_size": "4", "initial_workers": 1, "synchronous": "TRUE"}
        r = await server.management.post("/models", json=body)
        assert r.status_code == 200
        options = _last(server, "register")[2]
        assert (options["batch_size"], options["initial_workers"], options["synchronous"]) == (4, 1, True)

    run(check, tmp_path, enable_model_api=True)


@pytest.mark.parametrize(
    ("message", "status"),
    [("Processing worker updates...", 202), ("Workers scaling in progress...", 206),
     ('Model "m" Version: 1.0 registered with 1 initial workers', 200)],
)  # fmt: skip
def test_register_and_scale_statuses_follow_the_message(tmp_path, message, status):
    registry = FakeRegistry()
    registry.message = message

    async def check(server: Server) -> None:
        r = await server.management.post("/models?url=mnist.mar")
        assert (r.status_code, r.json()) == (status, {"status": message})
        r = await server.management.put("/models/mnist?min_worker=2")
        assert (r.status_code, r.json()) == (status, {"status": message})

    run(check, tmp_path, registry, enable_model_api=True)


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("", "Parameter url is required."),
        ("url=", "Parameter url is required."),
        ("url=a.mar&batch_size=abc", "batch_size"),
        ("url=a.mar&batch_size=-1", "batch_size"),
        ("url=a.mar&batch_size=0", "batch_size"),
        ("url=a.mar&initial_workers=-2", "initial_workers"),
        ("url=a.mar&max_batch_delay=1.5", "max_batch_delay"),
        ("url=a.mar&synchronous=maybe", "synchronous"),
        ("url=a.mar&runtime=LSP", "Invalid RuntimeType value: LSP"),
        ("url=a.mar&response_timeout=0", "response_timeout"),
    ],
)
def test_register_bad_parameters_are_400(tmp_path, query, needle):
    async def check(server: Server) -> None:
        r = await server.management.post(f"/models?{query}")
        body = r.json()
        assert (r.status_code, body["type"]) == (400, "BadRequestException") and needle in body["message"]
        assert not [c for c in server.registry.calls if c[0] == "register"]

    run(check, tmp_path, enable_model_api=True)


def test_register_bad_json_body_is_400(tmp_path):
    async def check(server: Server) -> None:
        headers = {"content-type": "application/json"}
        for content in (b"{url: 1", b'["a.mar"]', b'{"url": "a.mar", "batch_size": 2.5}'):
            r = await server.management.post("/models", content=content, headers=headers)
            assert r.status_code == 400, content

    run(check, tmp_path, enable_model_api=True)


def test_list_models_pagination_out_of_range_is_400_not_clamped(tmp_path):
    async def check(server: Server) -> None:
        r = await server.management.get("/models")
        assert r.json()["models"][0] == {"modelName": "bert", "modelUrl": "bert.mar"}
        assert _last(server, "list_models")[1:] == (100, 0)
        for query, expected in [("limit=5&next_page_token=2", (5, 2)), ("limit=100", (100, 0)), ("limit=1", (1, 0))]:
            assert (await server.management.get(f"/models?{query}")).status_code == 200
            assert _last(server, "list_models")[1:] == expected, query
        calls = len(server.registry.calls)
        for query, name in [("limit=ten", "limit"), ("limit=500", "limit"), ("limit=-1", "limit"), ("limit=0", "limit"),
                            ("next_page_token=-3", "next_page_token")]:  # fmt: skip
            r = await server.management.get(f"/models?{query}")
            assert r.status_code == 400 and f"Invalid {name}" in r.json()["message"], (query, r.text)
        assert len(server.registry.calls) == calls  # refused before the registry is asked

    run(check, tmp_path)


def test_describe_versions_all_and_customized(tmp_path):
    async def check(server: Server) -> None:
        r = await server.management.get("/models/mnist")
        assert r.json() == [{"modelName": "mnist", "modelVersion": "1.0", "workers": []}]
        assert _last(server, "describe")[1:] == ("mnist", None, False)
        await server.management.get("/models/mnist/2.0")
        assert _last(server, "describe")[1:] == ("mnist", "2.0", False)
        r = await server.management.get("/models/mnist/all")
        assert [d["modelVersion"] for d in r.json()] == ["1.0", "2.0"]
        r = await server.management.get("/models/mnist?customized=true")
        assert r.json()[0]["customizedMetadata"] == {"hello": "world"}
        assert _last(server, "describe_custom")[1:] == ("mnist", None)
        await server.management.get("/models/mnist/all?customized=true")  # ignored for all, as in TorchServe
        assert _last(server, "describe")[1:] == ("mnist", None, True)
        r = await server.management.get("/models/nope")
        assert (r.status_code, r.json()["message"]) == (404, "Model not found: nope")
        assert (await server.management.get("/models/mnist/7.0")).status_code == 404

    run(check, tmp_path)


def test_scale_parameters_and_defaults(tmp_path):
    async def check(server: Server) -> None:
        await server.management.put("/models/mnist")
        assert _last(server, "scale")[1:] == ("mnist", None, 1, 1, False, None)  # TorchServe's defaults
        await server.management.put("/models/mnist/2.0?min_worker=2&max_worker=4&synchronous=true&timeout=30")
        assert _last(server, "scale")[1:] == ("mnist", "2.0", 2, 4, True, 30)
        await server.management.put("/models/mnist?min_worker=3&model_version=2.0&timeout=-1&number_gpu=1")
        assert _last(server, "scale")[1:] == ("mnist", "2.0", 3, 3, False, None)
        r = await server.management.put("/models/nope?min_worker=1")
        assert r.status_code == 404

    run(check, tmp_path)


@pytest.mark.parametrize(
    ("query", "needle"),
    [("min_worker=abc", "min_worker"), ("min_worker=-1", "min_worker"),
     ("min_worker=3&max_worker=2", "max_worker cannot be less than min_worker."), ("synchronous=yes", "synchronous")],
)  # fmt: skip
def test_scale_bad_parameters_are_400(tmp_path, query, needle):
    async def check(server: Server) -> None:
        r = await server.management.put(f"/models/mnist?{query}")
        assert r.status_code == 400 and needle in r.json()["message"]
        assert not [c for c in server.registry.calls if c[0] == "scale"]

    run(check, tmp_path)


def test_set_default_and_unregister(tmp_path):
    async def check(server: Server) -> None:
        r = await server.management.put("/models/mnist/2.0/set-default")
        assert r.json() == {"status": 'Default version successfully updated for model "mnist" to "2.0"'}
        assert (await server.management.put("/models/mnist/9.0/set-default")).status_code == 404
        r = await server.management.delete("/models/mnist")
        assert (r.status_code, r.json()) == (200, {"status": 'Model "mnist" unregistered'})
        assert _last(server, "unregister")[1:] == ("mnist", None)
        await server.management.delete("/models/mnist/2.0")
        assert _last(server, "unregister")[1:] == ("mnist", "2.0")
        assert (await server.management.delete("/models/nope")).status_code == 404

    run(check, tmp_path, enable_model_api=True)


def test_wrong_methods_on_model_paths_are_405(tmp_path):
    async def check(server: Server) -> None:
        assert (await server.management.put("/models")).status_code == 405
        r = await server.management.post("/models/mnist")
        assert (r.status_code, r.json()["type"]) == (405, "MethodNotAllowedException")
        assert (await server.management.post("/predictions/mnist")).status_code == 404  # inference is another port

    run(check, tmp_path, enable_model_api=True)


def test_management_api_description_lists_model_paths(tmp_path):
    async def check(server: Server) -> None:
        paths = (await server.management.options("/")).json()["paths"]
        assert {"/models", "/models/{model_name}", "/models/{model_name}/{model_version}/set-default"} <= set(paths)
        assert "/ping" not in paths

    run(check, tmp_path)
