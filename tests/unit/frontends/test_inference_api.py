"""The inference app in-process: /ping, predictions and explanations, TorchServe's bodies and statuses."""

from __future__ import annotations

import json
import uuid

from serve.batching import InferenceRequest, InferenceResponse
from serve.errors import PredictionException, QueueFull, RequestTimeout, WorkerError
from tests.unit.frontends.fakes import FakeRegistry, Server, run


def _submitted(server: Server) -> InferenceRequest:
    calls = [c for c in server.registry.calls if c[0] == "submit"]
    assert calls, "the registry was not called"
    return calls[-1][3]


def test_ping_healthy_and_unhealthy(tmp_path):
    registry = FakeRegistry()

    async def check(server: Server) -> None:
        r = await server.inference.get("/ping")
        assert (r.status_code, r.text) == (200, '{\n  "status": "Healthy"\n}\n')
        registry.healthy = False
        r = await server.inference.post("/ping")  # any method, as in TorchServe
        assert (r.status_code, r.json()) == (500, {"status": "Unhealthy"})
        r = await server.inference.get("/health")  # vLLM's
        assert (r.status_code, r.content) == (503, b"")
        registry.healthy = True
        r = await server.inference.get("/health")
        assert (r.status_code, r.content) == (200, b"")

    run(check, tmp_path, registry)


def test_raw_json_body_reaches_the_handler_decoded_with_headers(tmp_path):
    async def check(server: Server) -> None:
        r = await server.inference.post("/predictions/mnist", json={"data": [1, 2]}, headers={"X-Trace": "abc"})
        assert (r.status_code, r.json()) == (200, {"ok": True})
        req = _submitted(server)
        assert server.registry.calls[-1][1:3] == ("mnist", None)
        assert req.handler_inputs() == {"body": {"data": [1, 2]}}
        assert req.content_types == {"body": "application/json"}
        assert req.headers["x-trace"] == "abc" and req.headers["url_path"] == "" and req.headers["explain"] == "False"
        assert req.explain is False
        assert r.headers["x-request-id"] == req.request_id
        uuid.UUID(req.request_id)

    run(check, tmp_path)


def test_body_decoding_follows_torchserve_rule(tmp_path):
    async def check(server: Server) -> None:
        await server.inference.post("/predictions/mnist", content=b"\x00\x01", headers={"content-type": "image/png"})
        assert _submitted(server).inputs == {"body": b"\x00\x01"}
        await server.inference.post("/predictions/mnist", content="héllo", headers={"content-type": "text/plain"})
        assert _submitted(server).handler_inputs() == {"body": "héllo"}
        await server.inference.post(
            "/predictions/mnist", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert _submitted(server).handler_inputs() == {"body": b"{not json"}  # TorchServe keeps the bytes
        await server.inference.post("/predictions/mnist", content=b"raw")
        assert _submitted(server).inputs == {"body": b"raw"} and _submitted(server).content_types == {}

    run(check, tmp_path)


def test_decode_input_request_false_keeps_bytes(tmp_path):
    async def check(server: Server) -> None:
        await server.inference.post("/predictions/mnist", json=[1])
        assert _submitted(server).handler_inputs() == {"body": b"[1]"}

    run(check, tmp_path, decode_input_request=False)


def test_multipart_fields_and_files(tmp_path):
    async def check(server: Server) -> None:
        files = {
            "data": ("x.json", b'{"a": 1}', "application/json"),
            "image": ("x.png", b"\x89PNG\r\n\r\n", "image/png"),
        }
        r = await server.inference.post("/predictions/mnist", data={"mode": ["slow", "fast"]}, files=files)
        assert r.status_code == 200
        req = _submitted(server)
        assert req.handler_inputs() == {"mode": b"fast", "data": {"a": 1}, "image": b"\x89PNG\r\n\r\n"}
        assert req.content_types == {"data": "application/json", "image": "image/png"}

    run(check, tmp_path)


def test_urlencoded_form_and_repeated_names(tmp_path):
    async def check(server: Server) -> None:
        body = "text=caf%C3%A9&n=1&n=2"
        headers = {"content-type": "application/x-www-form-urlencoded"}
        await server.inference.post("/predictions/mnist", content=body, headers=headers)
        assert _submitted(server).inputs == {"text": "café".encode(), "n": b"2"}  # the last value wins

    run(check, tmp_path)


def test_versions_sub_routes_and_explanations(tmp_path):
    async def check(server: Server) -> None:
        await server.inference.post("/predictions/mnist/2.0", content=b"x")
        assert server.registry.calls[-1][1:3] == ("mnist", "2.0")
        await server.inference.post("/predictions/mnist/2.0/v1/generate/custom", content=b"x")
        assert _submitted(server).headers["url_path"] == "v1/generate/custom"  # OpenAI's own: tests/unit/.../openai
        await server.inference.post("/explanations/mnist", content=b"x")
        req = _submitted(server)
        assert req.explain is True and req.headers["explain"] == "True"
        await server.inference.post("/explanations/mnist/1.0", content=b"x")
        assert server.registry.calls[-1][1:3] == ("mnist", "1.0") and _submitted(server).explain
        r = await server.inference.post("/predictions/mnist/", content=b"x")  # trailing slash, as TorchServe
        assert r.status_code == 200 and server.registry.calls[-1][2] is None

    run(check, tmp_path)


def test_handler_status_headers_and_content_type_pass_through(tmp_path):
    registry = FakeRegistry()

    async def respond(request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(status=201, body=b"made", content_type="text/plain", headers={"x-model": "m"})

    registry.responder = respond

    async def check(server: Server) -> None:
        r = await server.inference.post("/predictions/mnist", content=b"x")
        assert (r.status_code, r.text, r.headers["x-model"]) == (201, "made", "m")
        assert r.headers["content-type"].startswith("text/plain")
        assert r.headers["pragma"] == "no-cache" and "no-store" in r.headers["cache-control"]

    run(check, tmp_path, registry)


def test_streamed_answer_is_chunked(tmp_path):
    registry = FakeRegistry()

    async def chunks():
        for part in (b"one ", b"two ", b"three"):
            yield part

    async def respond(request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(content_type="text/plain", chunks=chunks(), headers={"ts_stream_next": "false"})

    registry.responder = respond

    async def check(server: Server) -> None:
        r = await server.inference.post("/predictions/mnist", content=b"x")
        assert (r.status_code, r.text) == (200, "one two three")
        assert "content-length" not in r.headers  # chunked transfer
        page, _ = server.metrics.render({"ts_inference_requests_total"})
        assert b'model_name="mnist"' in page  # recorded at the end of the stream

    run(check, tmp_path, registry)


def _error(r) -> dict:
    body = r.json()
    assert body["code"] == r.status_code and r.text.endswith("\n") and r.text.startswith("{\n  ")
    return body


def test_unknown_model_and_version_are_404(tmp_path):
    async def check(server: Server) -> None:
        r = await server.inference.post("/predictions/nope", content=b"x")
        assert r.status_code == 404
        assert _error(r) == {"code": 404, "type": "ModelNotFoundException", "message": "Model not found: nope"}
        r = await server.inference.post("/predictions/mnist/9.9", content=b"x")
        assert r.status_code == 404 and "9.9" in _error(r)["message"]

    run(check, tmp_path)


def test_serving_errors_map_to_torchserve_statuses(tmp_path):
    registry = FakeRegistry()
    cases = [
        (QueueFull('Model "mnist" has no worker to serve inference request.'), 503, "ServiceUnavailableException"),
        (PredictionException("bad input row 3", 513), 513, "InternalServerException"),
        (WorkerError("Worker died (exit code -9); the request was lost"), 500, "InternalServerException"),
        (RequestTimeout("no answer within response_timeout 2 s"), 504, "RequestTimeoutException"),
    ]

    async def check(server: Server) -> None:
        for exc, status, type_name in cases:

            async def fail(request: InferenceRequest, exc=exc) -> InferenceResponse:
                raise exc

            registry.responder = fail
            r = await server.inference.post("/predictions/mnist", content=b"x")
            assert (r.status_code, _error(r)) == (status, {"code": status, "type": type_name, "message": str(exc)})

    run(check, tmp_path, registry)


def test_unexpected_bug_is_a_500_with_the_error_body(tmp_path):
    registry = FakeRegistry()

    async def boom(request: InferenceRequest) -> InferenceResponse:
        raise KeyError("oops")

    registry.responder = boom

    async def check(server: Server) -> None:
        r = await server.inference.post("/predictions/mnist", content=b"x")
        assert r.status_code == 500 and _error(r)["type"] == "InternalServerException"
        assert "KeyError" in r.json()["message"] and "x-request-id" in r.headers

    run(check, tmp_path, registry)


def test_unknown_paths_and_methods(tmp_path):
    async def check(server: Server) -> None:
        r = await server.inference.get("/nowhere")
        assert r.status_code == 404
        assert _error(r) == {"code": 404, "type": "ResourceNotFoundException",
                             "message": "Requested resource is not found, please refer to API document."}  # fmt: skip
        r = await server.inference.get("/predictions/mnist")
        assert (r.status_code, _error(r)["type"]) == (405, "MethodNotAllowedException")
        assert set(r.headers["allow"].split(", ")) == {"POST", "PUT"}
        r = await server.inference.get("/")  # KServe v1 liveness on the inference port
        assert (r.status_code, r.json()) == (200, {"status": "alive"})
        assert (await server.management.get("/")).status_code == 405
        assert (await server.inference.get("/models")).status_code == 404  # management lives on its own port

    run(check, tmp_path)


def test_api_description_and_openapi(tmp_path):
    async def check(server: Server) -> None:
        r = await server.inference.options("/")
        doc = r.json()
        assert r.status_code == 200 and doc["info"]["title"] == "TorchServe APIs"
        assert {"/ping", "/predictions/{model_name}", "/explanations/{model_name}"} <= set(doc["paths"])
        assert "/models" not in doc["paths"]
        assert (await server.inference.get("/api-description")).json() == doc
        assert (await server.inference.get("/openapi.json")).status_code == 200
        assert (await server.inference.get("/docs")).status_code == 200

    run(check, tmp_path)


def test_malformed_multipart_is_a_400_not_a_500(tmp_path):
    async def check(server: Server) -> None:
        headers = {"content-type": "multipart/form-data"}
        r = await server.inference.post("/predictions/mnist", content=b"--x\r\n", headers=headers)
        assert r.status_code == 400 and "boundary" in _error(r)["message"]
        headers = {"content-type": "multipart/form-data; boundary=xyz"}
        r = await server.inference.post("/predictions/mnist", content=b"--xyz\r\nno end", headers=headers)
        assert (r.status_code, _error(r)["type"]) == (400, "BadRequestException")
        assert not [c for c in server.registry.calls if c[0] == "submit"]

    run(check, tmp_path)


def test_response_body_is_json_pretty_printed(tmp_path):
    async def check(server: Server) -> None:
        r = await server.inference.get("/ping")
        assert json.loads(r.text) == {"status": "Healthy"} and r.headers["content-type"] == "application/json"

    run(check, tmp_path)
