"""What every listener shares: max_request_size (413), no-cache headers, request ids, CORS, trailing slashes."""

from __future__ import annotations

from tests.unit.frontends.fakes import Server, run


def _submits(server: Server) -> int:
    return len([c for c in server.registry.calls if c[0] == "submit"])


def test_body_over_max_request_size_is_413_before_the_handler(tmp_path):
    async def check(server: Server) -> None:
        r = await server.inference.post("/predictions/mnist", content=b"x" * 101)
        body = r.json()
        assert (r.status_code, body["code"], body["type"]) == (413, 413, "RequestEntityTooLargeException")
        assert "101 bytes" in body["message"] and "max_request_size (100 bytes)" in body["message"]
        assert r.headers["connection"] == "close" and "x-request-id" in r.headers
        assert (await server.inference.post("/predictions/mnist", content=b"x" * 100)).status_code == 200
        assert _submits(server) == 1

    run(check, tmp_path, max_request_size=100)


def test_chunked_body_is_cut_off_at_the_limit(tmp_path):
    async def chunks():
        for _ in range(10):
            yield b"y" * 30

    async def check(server: Server) -> None:
        r = await server.inference.post("/predictions/mnist", content=chunks())  # no Content-Length
        assert (r.status_code, r.json()["code"]) == (413, 413)
        r = await server.management.post("/models", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413  # every listener has the limit
        assert _submits(server) == 0

    run(check, tmp_path, max_request_size=100, enable_model_api=True)


def test_every_response_gets_torchserve_headers_and_a_fresh_request_id(tmp_path):
    async def check(server: Server) -> None:
        ids = set()
        for r in (await server.inference.get("/ping"), await server.inference.get("/nope"),
                  await server.management.get("/models"), await server.metrics_api.get("/metrics")):  # fmt: skip
            assert r.headers["pragma"] == "no-cache"
            assert r.headers["cache-control"] == "no-cache; no-store, must-revalidate, private"
            assert r.headers["expires"] == "Thu, 01 Jan 1970 00:00:00 UTC"
            ids.add(r.headers["x-request-id"])
        assert len(ids) == 4

    run(check, tmp_path)


def test_trailing_slashes_are_ignored(tmp_path):
    async def check(server: Server) -> None:
        assert (await server.management.get("/models/")).status_code == 200
        assert (await server.management.get("/models/mnist/")).json()[0]["modelName"] == "mnist"
        assert (await server.inference.get("/ping/")).status_code == 200

    run(check, tmp_path)


def test_cors_headers_when_configured(tmp_path):
    async def check(server: Server) -> None:
        r = await server.inference.get("/ping", headers={"Origin": "http://app.example"})
        assert r.headers["access-control-allow-origin"] == "http://app.example"
        preflight = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST"}
        r = await server.inference.options("/predictions/mnist", headers=preflight)
        assert r.status_code == 200 and "POST" in r.headers["access-control-allow-methods"]
        r = await server.inference.get("/ping", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in r.headers

    run(check, tmp_path, cors_allowed_origin="http://app.example", cors_allowed_methods="GET, POST")


def test_no_cors_headers_by_default(tmp_path):
    async def check(server: Server) -> None:
        r = await server.inference.get("/ping", headers={"Origin": "http://app.example"})
        assert "access-control-allow-origin" not in r.headers

    run(check, tmp_path)
