"""The OpenAPI documents are true (serve/frontends/http/openapi.py, issue 17 item 9), checked against the apps'
own routes and answers: every route and method is documented, FastAPI's 422 never, the statuses the routes
answer are, management lists the query parameters it reads, /metrics is text/plain, and a 405 names every method
of the path in Allow. tests/integration/test_schemathesis.py fuzzes the same documents against a real server.
"""

from __future__ import annotations

from typing import Any

from serve.frontends.http.openapi import flat_routes
from tests.unit.frontends.fakes import Server, run

FASTAPI_OWN = {"/openapi.json", "/docs", "/docs/oauth2-redirect"}


async def _document(client: Any) -> dict[str, Any]:
    r = await client.get("/openapi.json")
    assert r.status_code == 200
    return r.json()


def _operations(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(method.upper(), path): op for path, ops in doc["paths"].items() for method, op in ops.items()}


def test_every_route_and_method_is_documented_and_no_422(tmp_path):
    async def check(server: Server) -> None:
        for client in (server.inference, server.management, server.metrics_api):
            app = client._transport.app  # type: ignore[attr-defined]
            app = getattr(app, "app", app)  # the inference app behind its prediction fast path
            operations = _operations(await _document(client))
            for route in flat_routes(app.router.routes):
                if route.path in FASTAPI_OWN or route.path.startswith("/v2/{rest") or route.path == "/token":
                    continue  # /token: see test_token_rotation_is_documented_only_with_token_authorization
                path = route.path.replace(":path}", "}")
                for method in (route.methods or set()) - {"HEAD"}:
                    assert (method, path) in operations, f"{method} {path} is answered but not documented"
            for (method, path), op in operations.items():
                assert "422" not in op["responses"], f"{method} {path} declares FastAPI's 422"

    run(check, tmp_path)


def test_v1_v2_and_the_statuses_they_answer_are_in_the_inference_document(tmp_path):
    async def check(server: Server) -> None:
        operations = _operations(await _document(server.inference))
        assert {("POST", "/v2/models/{model_name}/infer"), ("GET", "/v2/health/ready"),
                ("POST", "/v1/models/{model_name}:predict"), ("GET", "/v1/models")} <= set(operations)  # fmt: skip
        infer = operations[("POST", "/v2/models/{model_name}/infer")]
        assert {"200", "400", "401", "404", "503"} <= set(infer["responses"])
        assert set(infer["responses"]["404"]["content"]["application/json"]["schema"]["properties"]) == {"error"}
        predict = operations[("POST", "/predictions/{model_name}")]
        assert {"200", "400", "401", "404", "413", "503"} <= set(predict["responses"])
        unknown = await server.inference.post("/v2/models/nope/infer", json={"inputs": []})
        assert str(unknown.status_code) in infer["responses"]
        not_ready = await server.inference.post("/predictions/nope", content=b"x")
        assert str(not_ready.status_code) in predict["responses"]

    run(check, tmp_path)


def test_management_lists_its_query_parameters_and_worker_statuses(tmp_path):
    async def check(server: Server) -> None:
        operations = _operations(await _document(server.management))

        def names(method: str, path: str) -> set[str]:
            return {p["name"] for p in operations[(method, path)].get("parameters", []) if p["in"] == "query"}

        assert names("GET", "/models") == {"limit", "next_page_token"}
        assert {"url", "model_name", "initial_workers", "batch_size", "synchronous"} <= names("POST", "/models")
        assert {"min_worker", "max_worker", "synchronous", "timeout"} <= names("PUT", "/models/{model_name}")
        assert names("GET", "/models/{model_name}") == {"customized"}
        limit = next(p for p in operations[("GET", "/models")]["parameters"] if p["name"] == "limit")
        assert (limit["schema"]["minimum"], limit["schema"]["maximum"]) == (1, 100)
        for status in ("202", "400", "404", "503"):
            assert status in operations[("PUT", "/models/{model_name}")]["responses"]
        bad = await server.management.get("/models?limit=0")
        assert str(bad.status_code) in operations[("GET", "/models")]["responses"]

    run(check, tmp_path)


def test_token_rotation_is_documented_only_with_token_authorization(tmp_path):
    async def check(server: Server) -> None:
        operations = _operations(await _document(server.management))
        if not server.auth.enabled:  # no key to rotate: every request would be a 400
            assert ("GET", "/token") not in operations
            assert (await server.management.get("/token?type=inference")).status_code == 400
            return
        assert {p["name"] for p in operations[("GET", "/token")]["parameters"]} == {"type"}
        assert {"200", "400", "401"} <= set(operations[("GET", "/token")]["responses"])

    run(check, tmp_path)
    (tmp_path / "on").mkdir()
    run(check, tmp_path / "on", disable_token_authorization=False)


def test_metrics_is_text_plain(tmp_path):
    async def check(server: Server) -> None:
        op = _operations(await _document(server.metrics_api))[("GET", "/metrics")]
        assert list(op["responses"]["200"]["content"]) == ["text/plain"]
        r = await server.metrics_api.get("/metrics")
        assert r.headers["content-type"].startswith("text/plain")

    run(check, tmp_path)


def test_a_405_names_every_method_of_the_path(tmp_path):
    async def check(server: Server) -> None:
        r = await server.management.request("PATCH", "/models")  # GET and POST are two routes
        assert r.status_code == 405 and set(r.headers["allow"].split(", ")) >= {"GET", "POST"}
        r = await server.management.request("PATCH", "/models/m")
        assert r.status_code == 405 and set(r.headers["allow"].split(", ")) >= {"GET", "PUT", "DELETE"}
        r = await server.inference.put("/v2/health/live")  # was the /v2 catch-all's 404
        assert (r.status_code, r.headers["allow"]) == (405, "GET, HEAD") and "error" in r.json()
        r = await server.inference.request("OPTIONS", "/v1/models/m:predict")
        assert (r.status_code, r.headers["allow"]) == (405, "POST")
        assert (await server.inference.get("/v2/no/such/path")).status_code == 404

    run(check, tmp_path)


def test_a_405_for_the_model_api_being_off_names_what_still_works(tmp_path):
    async def check(server: Server) -> None:
        r = await server.management.post("/models?url=m.mar")
        assert (r.status_code, r.json()["type"]) == (405, "MethodNotAllowedException")
        assert r.headers["allow"] == "GET"
        r = await server.management.delete("/models/m")
        assert r.status_code == 405 and set(r.headers["allow"].split(", ")) == {"GET", "PUT"}

    run(check, tmp_path, enable_model_api=False)
