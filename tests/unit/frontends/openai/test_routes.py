"""The OpenAI routes' validation (400 naming the field), auth (Bearer inference key), the model list shared with
KServe v1, the /predictions/{m}[/{v}]/v1 forms, embeddings, the v2 generate extension, and cancellation: closing
the stream closes every model stream."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator

import numpy as np

from serve.batching import InferenceRequest, InferenceResponse
from serve.frontends.openai import sse, wire
from tests.unit.frontends.fakes import Server, run
from tests.unit.frontends.openai.fake_model import GenModel, chunk

USER = [{"role": "user", "content": "x"}]


def test_bad_and_unsupported_fields_are_400s_naming_the_field(tmp_path):
    async def check(s: Server) -> None:
        GenModel(s.registry)
        cases = [
            ("/v1/completions", {"prompt": "x", "temperature": 3}, "temperature"),
            ("/v1/completions", {"prompt": "x", "n": 0}, "n"),
            ("/v1/completions", {"prompt": "x", "frobnicate": 1}, "frobnicate"),
            ("/v1/completions", {"prompt": "x", "logit_bias": {"5": 1}}, "logit_bias"),
            ("/v1/completions", {"prompt": "x", "suffix": "y"}, "suffix"),
            ("/v1/completions", {"prompt": []}, "prompt"),
            ("/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
            ("/v1/completions", {"prompt": "x", "echo": True, "logprobs": 1}, "echo"),
            ("/v1/chat/completions", {"messages": USER, "tools": [{"type": "function"}]}, "tools"),
            ("/v1/chat/completions", {"messages": USER, "response_format": {"type": "json_object"}}, "response_format"),
            ("/v1/chat/completions", {"messages": USER, "top_logprobs": 2}, "top_logprobs"),
            ("/v1/chat/completions", {"messages": []}, "messages"),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
             "messages.0.content.0.type"),
            ("/v1/embeddings", {"input": [[1, 2]]}, "input"),
            ("/v1/embeddings", {"input": "x", "dimensions": 8}, "dimensions"),
        ]  # fmt: skip
        for path, body, param in cases:
            r = await s.inference.post(path, json={"model": "mnist", **body})
            assert r.status_code == 400, (body, r.text)
            error = r.json()["error"]
            assert error["param"] == param and error["type"] == "invalid_request_error", (body, error)
            assert param.split(".")[-1] in error["message"], error
        r = await s.inference.post("/v1/completions", json={"prompt": "x"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "model"
        r = await s.inference.post("/v1/completions", content=b"{nope")
        assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]
        harmless = {"model": "mnist", "messages": USER, "tools": [], "tool_choice": "none", "user": "u",
                    "response_format": {"type": "text"}, "parallel_tool_calls": False, "store": False}  # fmt: skip
        assert (await s.inference.post("/v1/chat/completions", json=harmless)).status_code == 200

    run(check, tmp_path)


def test_the_inference_key_as_bearer_guards_every_route(tmp_path):
    async def check(s: Server) -> None:
        GenModel(s.registry)
        key = {"Authorization": f"Bearer {s.auth.key('inference')}"}
        body = {"model": "mnist", "prompt": "x"}
        for path in ("/v1/completions", "/predictions/mnist/v1/completions"):
            r = await s.inference.post(path, json=body)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert (
                r.json()["error"]["type"] == "authentication_error" and "inference key" in r.json()["error"]["message"]
            )
            assert (await s.inference.post(path, json=body, headers=key)).status_code == 200
        r = await s.inference.post("/v1/completions", json=body, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert (await s.inference.get("/v1/models")).status_code == 401
        assert (await s.inference.get("/v1/models", headers=key)).status_code == 200
        r = await s.inference.post("/v2/models/mnist/generate", json={"text_input": "x"})
        assert r.status_code == 401 and isinstance(r.json()["error"], str)

    run(check, tmp_path, disable_token_authorization=False)


def test_model_list_shared_with_kserve_v1_and_the_predictions_forms(tmp_path):
    async def check(s: Server) -> None:
        model = GenModel(s.registry)
        listing = (await s.inference.get("/v1/models")).json()
        assert listing["object"] == "list" and listing["models"] == ["bert", "mnist"]
        assert [(m["id"], m["object"], m["owned_by"]) for m in listing["data"]] == [
            ("bert", "model", "serve"),
            ("mnist", "model", "serve"),
        ]
        one = (await s.inference.get("/v1/models/mnist")).json()
        assert one["id"] == "mnist" and one["object"] == "model" and isinstance(one["created"], int)
        assert (await s.inference.get("/v1/models/nope")).status_code == 404
        elsewhere = await s.inference.get("/predictions/mnist/v1/models/other")  # another model under mnist's path
        assert elsewhere.status_code == 404 and "/predictions/mnist" in elsewhere.json()["error"]["message"]
        only = (await s.inference.get("/predictions/mnist/v1/models")).json()
        assert [m["id"] for m in only["data"]] == ["mnist"]
        assert (await s.inference.get("/predictions/nope/v1/models")).status_code == 404
        for path, version in (("/predictions/mnist/v1/completions", None),
                              ("/predictions/mnist/2.0/v1/completions", "2.0")):  # fmt: skip
            r = await s.inference.post(path, json={"model": "mnist", "prompt": "x"})
            assert r.status_code == 200 and r.json()["model"] == "mnist"
            assert s.registry.calls[-1][1:3] == ("mnist", version)
            assert model.jobs[-1].headers["url_path"] == ""  # the wire, not a handler sub-route
        r = await s.inference.post("/predictions/mnist/v1/completions", json={"prompt": "x"})
        assert r.status_code == 200
        r = await s.inference.post("/predictions/mnist/v1/completions", json={"model": "bert", "prompt": "x"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "model"

    run(check, tmp_path)


def test_embeddings_float_and_base64_with_usage(tmp_path):
    async def check(s: Server) -> None:
        seen: list[dict] = []

        async def embed(job: InferenceRequest) -> InferenceResponse:
            text = json.loads(job.inputs["body"])["text"]
            seen.append(json.loads(job.inputs["body"]))
            if text == "counted":
                return InferenceResponse(body=json.dumps({"embedding": [1.0, 2.0], "prompt_tokens": 9}).encode())
            return InferenceResponse(body=json.dumps([0.5, -0.25, len(text)]).encode())

        s.registry.responder = embed
        r = await s.inference.post("/v1/embeddings", json={"model": "mnist", "input": ["hello", "abcdefghi"]})
        answer = r.json()
        assert (
            answer["object"] == "list"
            and answer["model"] == "mnist"
            and seen == [{"text": "hello"}, {"text": "abcdefghi"}]
        )
        assert answer["data"] == [{"object": "embedding", "index": 0, "embedding": [0.5, -0.25, 5.0]},
                                  {"object": "embedding", "index": 1, "embedding": [0.5, -0.25, 9.0]}]  # fmt: skip
        assert answer["usage"] == {"prompt_tokens": 2 + 3, "total_tokens": 5}  # ceil(bytes / 4) each
        r = await s.inference.post("/v1/embeddings", json={"model": "mnist", "input": "counted",
                                                            "encoding_format": "base64"})  # fmt: skip
        vector = np.frombuffer(base64.b64decode(r.json()["data"][0]["embedding"]), dtype="<f4")
        assert vector.tolist() == [1.0, 2.0] and r.json()["usage"]["prompt_tokens"] == 9
        GenModel(s.registry)  # a generative model answers no embedding
        r = await s.inference.post("/v1/embeddings", json={"model": "mnist", "input": "x"})
        assert r.status_code == 400 and "embedding model" in r.json()["error"]["message"]

    run(check, tmp_path)


def test_oip_generate_and_generate_stream(tmp_path):
    async def check(s: Server) -> None:
        model = GenModel(s.registry)
        body = {"text_input": "hi", "parameters": {"max_tokens": 4, "temperature": 0, "stream": False}}
        r = await s.inference.post("/v2/models/mnist/versions/2.0/generate", json=body)
        assert r.json() == {"model_name": "mnist", "model_version": "2.0", "text_output": "Hello",
                            "finish_reason": "stop"}  # fmt: skip
        assert model.requests[0]["prompt"] == "hi" and model.requests[0]["sampling"] == {
            "max_tokens": 4,
            "temperature": 0.0,
        }
        r = await s.inference.post("/v2/models/mnist/generate_stream", json={"text_input": "hi", "max_tokens": 2})
        assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert r.content == (b'data: {"model_name":"mnist","model_version":"1.0","text_output":"Hel",'
                             b'"finish_reason":null}\n\n'
                             b'data: {"model_name":"mnist","model_version":"1.0","text_output":"lo",'
                             b'"finish_reason":"stop"}\n\n')  # fmt: skip
        r = await s.inference.post("/v2/models/mnist/generate", json={"text_input": "hi", "beam_width": 2})
        assert r.status_code == 400 and "beam_width" in r.json()["error"]
        r = await s.inference.post("/v2/models/nope/generate", json={"text_input": "hi"})
        assert r.status_code == 404 and isinstance(r.json()["error"], str)

    run(check, tmp_path)


def test_closing_the_stream_closes_every_model_stream():
    closed: list[int] = []

    async def source(i: int, n: int) -> AsyncIterator[wire.Chunk]:
        try:
            for k in range(n):
                yield wire.Chunk(index=0, text=f"{i}.{k}")
                await asyncio.sleep(0)
        finally:
            closed.append(i)

    async def main() -> None:
        merged = wire.merge([source(0, 1000), source(1, 1000)])

        async def texts() -> AsyncIterator[dict]:
            try:
                async for c in merged:
                    yield {"text": c.text}
            finally:
                await merged.aclose()  # type: ignore[attr-defined]

        framed = sse.framed(texts())
        first = await framed.__anext__()
        assert first.startswith(b"data: {") and b'"text":"' in first
        await framed.aclose()  # what Starlette does when the client goes away
        assert sorted(closed) == [0, 1]
        got = [c.index async for c in wire.merge([source(2, 3), source(3, 2)])]
        assert sorted(got) == [0, 0, 0, 1, 1]

    asyncio.run(asyncio.wait_for(main(), timeout=10))


def test_model_streams_are_closed_when_the_client_disconnects_mid_stream(tmp_path):
    async def check(s: Server) -> None:
        model = GenModel(s.registry, [chunk(str(i), [i], done=i) for i in range(200)])
        body = {"model": "mnist", "prompt": "x", "stream": True, "n": 2}
        async with s.inference.stream("POST", "/v1/completions", json=body) as r:
            async for _ in r.aiter_bytes():
                break
        for _ in range(200):  # bounded: the close runs on the app's side of the in-process transport
            if model.closed == 2:
                break
            await asyncio.sleep(0.01)
        assert model.closed == 2

    run(check, tmp_path)
