"""/v1/completions and /v1/chat/completions in-process against a fake generative model (fake_model.py): every
field's mapping onto the wire of gen_contract.md, the answers' shapes (usage, finish_reason, both logprobs shapes),
SSE framing byte for byte, include_usage, n and list prompts, and errors before and after the stream started."""

from __future__ import annotations

import json
from typing import Any

from serve.errors import QueueFull
from tests.unit.frontends.fakes import Server, run
from tests.unit.frontends.openai.fake_model import GenModel, chunk, refusing

LOGPROBS = [{"token": "é", "token_id": 5, "logprob": -0.5,
             "top_logprobs": [{"token": "é", "token_id": 5, "logprob": -0.5}, {"token": "a", "token_id": 6,
                                                                             "logprob": -1.5}]}]  # fmt: skip


def events(body: bytes) -> list[Any]:
    frames = body.split(b"\n\n")
    assert frames[-1] == b"" and all(f.startswith(b"data: ") for f in frames[:-1]), body
    return [f[6:].decode() if f == b"data: [DONE]" else json.loads(f[6:]) for f in frames[:-1]]


def test_completion_fields_map_onto_the_wire_and_the_answer(tmp_path):
    async def check(s: Server) -> None:
        model = GenModel(s.registry)
        body = {"model": "mnist", "prompt": "hi", "temperature": 0.5, "top_p": 0.9, "stop": "\n", "seed": 7,
                "presence_penalty": 0.1, "frequency_penalty": 0.2, "top_k": -1, "min_p": 0.05,
                "repetition_penalty": 1.1, "ignore_eos": True, "min_tokens": 2, "stop_token_ids": [9],
                "user": "u", "metadata": {"a": "b"}, "tools": [], "logit_bias": {}}  # fmt: skip
        r = await s.inference.post("/v1/completions", json=body)
        assert r.status_code == 200, r.text
        wire = model.requests[0]
        assert wire == {"prompt": "hi", "prompt_token_ids": None, "messages": None, "sampling": {
            "max_tokens": 16, "temperature": 0.5, "top_p": 0.9, "top_k": 0, "min_p": 0.05, "repetition_penalty": 1.1,
            "presence_penalty": 0.1, "frequency_penalty": 0.2, "seed": 7, "ignore_eos": True, "min_tokens": 2,
            "stop_token_ids": [9], "stop": ["\n"]}}  # fmt: skip
        assert model.jobs[0].headers["content-type"] == "application/json" and model.jobs[0].decode
        answer = r.json()
        assert answer["object"] == "text_completion" and answer["id"].startswith("cmpl-") and answer["model"] == "mnist"
        assert answer["choices"] == [{"index": 0, "text": "Hello", "logprobs": None, "finish_reason": "stop"}]
        assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        # only what the client set reaches the model (the model's defaults apply); token ids; echo
        await s.inference.post("/v1/completions", json={"model": "mnist", "prompt": [4, 5], "max_tokens": 3,
                                                         "echo": True})  # fmt: skip
        assert model.requests[1] == {"prompt": None, "prompt_token_ids": [4, 5], "messages": None,
                                     "sampling": {"max_tokens": 3}, "echo": True}  # fmt: skip

    run(check, tmp_path)


def test_list_prompts_and_n_are_one_request_each_choices_by_index_seeds_apart(tmp_path):
    async def check(s: Server) -> None:
        model = GenModel(s.registry)
        body = {"model": "mnist", "prompt": [[3], [1, 2]], "n": 2, "seed": 10, "max_tokens": 4}
        answer = (await s.inference.post("/v1/completions", json=body)).json()
        sent = sorted(str((r["prompt"], r["prompt_token_ids"], r["sampling"]["seed"])) for r in model.requests)
        assert sent == sorted(map(str, [(None, [3], 10), (None, [3], 11), (None, [1, 2], 10), (None, [1, 2], 11)]))
        assert [r["prompt"] for r in model.requests[4:]] == []
        await s.inference.post("/v1/completions", json={"model": "mnist", "prompt": ["a", "b"]})
        assert sorted(r["prompt"] for r in model.requests[4:]) == ["a", "b"]
        assert [c["index"] for c in answer["choices"]] == [0, 1, 2, 3]
        # prompt tokens once per prompt, completion tokens of every choice
        assert answer["usage"] == {"prompt_tokens": 6, "completion_tokens": 8, "total_tokens": 14}

    run(check, tmp_path)


def test_echo_prepends_the_prompt_text_and_completion_logprobs_take_openai_legacy_shape(tmp_path):
    async def check(s: Server) -> None:
        GenModel(s.registry, [chunk("ab", [1], prompt_text="hi ", done=1), chunk("é", [5], "length", done=2,
                                                                                logprobs=LOGPROBS)])  # fmt: skip
        r = await s.inference.post("/v1/completions", json={"model": "mnist", "prompt": "hi ", "echo": True})
        assert r.json()["choices"][0]["text"] == "hi abé" and r.json()["choices"][0]["finish_reason"] == "length"
        GenModel(s.registry, [chunk("x", [1], logprobs=[{**LOGPROBS[0], "token": "x"}]),
                              chunk("é", [5], "stop", logprobs=LOGPROBS)])  # fmt: skip
        r = await s.inference.post("/v1/completions", json={"model": "mnist", "prompt": "p", "logprobs": 2})
        assert r.json()["choices"][0]["logprobs"] == {"tokens": ["x", "é"], "token_logprobs": [-0.5, -0.5],
                                                      "top_logprobs": [{"é": -0.5, "a": -1.5}, {"é": -0.5, "a": -1.5}],
                                                      "text_offset": [0, 1]}  # fmt: skip
        r = await s.inference.post("/v1/completions", json={"model": "mnist", "prompt": "p", "logprobs": 0})
        assert r.json()["choices"][0]["logprobs"]["top_logprobs"] == [None, None]

    run(check, tmp_path)


def test_chat_maps_messages_and_answers_chat_completion_with_chat_logprobs(tmp_path):
    async def check(s: Server) -> None:
        model = GenModel(s.registry, [chunk("é", [5], "stop", done=1, logprobs=LOGPROBS)])
        body = {"model": "mnist", "messages": [{"role": "system", "content": "be brief"},
                                               {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                            {"type": "text", "text": "b"}]}],
                "max_tokens": 5, "max_completion_tokens": 7, "logprobs": True, "top_logprobs": 1}  # fmt: skip
        answer = (await s.inference.post("/v1/chat/completions", json=body)).json()
        assert model.requests[0]["messages"] == [{"role": "system", "content": "be brief"},
                                                 {"role": "user", "content": "ab"}]  # fmt: skip
        assert model.requests[0]["sampling"] == {"max_tokens": 7, "logprobs": 1}
        assert answer["object"] == "chat.completion" and answer["id"].startswith("chatcmpl-")
        token = {"token": "é", "logprob": -0.5, "bytes": [195, 169]}
        assert answer["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "é"},
                                      "logprobs": {"content": [{**token, "top_logprobs": [
                                          token, {"token": "a", "logprob": -1.5, "bytes": [97]}]}]},
                                      "finish_reason": "stop"}]  # fmt: skip
        assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}

    run(check, tmp_path)


def test_streamed_completion_is_sse_byte_for_byte_with_include_usage(tmp_path):
    async def check(s: Server) -> None:
        GenModel(s.registry, [chunk("Hel", [1], done=1), chunk("", [7], done=2), chunk("lo", [2], "stop", done=3)])
        body = {"model": "mnist", "prompt": "hi", "stream": True, "stream_options": {"include_usage": True}}
        r = await s.inference.post("/v1/completions", json=body)
        assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream; charset=utf-8"
        first = json.loads(r.content.split(b"\n\n")[0][6:])
        rid, created = first["id"], first["created"]
        head = f'"id":"{rid}","object":"text_completion","created":{created},"model":"mnist"'
        assert (
            r.content
            == (
                f'data: {{{head},"choices":[{{"index":0,"text":"Hel","logprobs":null,"finish_reason":null}}],'
                f'"usage":null}}\n\n'
                f'data: {{{head},"choices":[{{"index":0,"text":"lo","logprobs":null,"finish_reason":"stop"}}],'
                f'"usage":null}}\n\n'
                f'data: {{{head},"choices":[],"usage":{{"prompt_tokens":3,"completion_tokens":3,'
                f'"total_tokens":6}}}}\n\n'
                "data: [DONE]\n\n"
            ).encode()
        )
        body.pop("stream_options")
        r = await s.inference.post("/v1/completions", json=body)
        got = events(r.content)
        assert got[-1] == "[DONE]" and all("usage" not in e for e in got[:-1]) and len(got) == 3

    run(check, tmp_path)


def test_continuous_usage_stats_puts_the_usage_so_far_on_every_event(tmp_path):
    """vLLM's stream_options.continuous_usage_stats (guidellm sends it), on both routes."""

    async def check(s: Server) -> None:
        GenModel(s.registry, [chunk("Hel", [1], done=1), chunk("lo", [2], "stop", done=2)])
        options = {"include_usage": True, "continuous_usage_stats": True}
        for path, source in (("/v1/completions", {"prompt": "hi"}),
                             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})):  # fmt: skip
            body = {"model": "mnist", **source, "stream": True, "stream_options": options}
            got = events((await s.inference.post(path, json=body)).content)
            with_text = [e for e in got[:-1] if e["choices"] and _text(e["choices"][0])]
            assert with_text[0]["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}, path
            assert got[-2] == {**got[-2], "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                                                   "total_tokens": 5}}  # fmt: skip

    run(check, tmp_path)


def _text(choice: dict[str, Any]) -> str:
    return choice.get("text") or choice.get("delta", {}).get("content") or ""


def test_streamed_chat_opens_with_the_role_then_content_deltas(tmp_path):
    async def check(s: Server) -> None:
        GenModel(s.registry, [chunk("Hi", [1], done=1), chunk("", [2], "stop", done=2)])
        body = {"model": "mnist", "messages": [{"role": "user", "content": "x"}], "stream": True, "n": 2}
        got = events((await s.inference.post("/v1/chat/completions", json=body)).content)
        assert got[-1] == "[DONE]"
        assert {e["object"] for e in got[:-1]} == {"chat.completion.chunk"}
        choices = [e["choices"][0] for e in got[:-1]]
        assert [c["delta"] for c in choices[:2]] == [{"role": "assistant", "content": ""}] * 2
        assert [c["index"] for c in choices[:2]] == [0, 1]
        for i in (0, 1):
            mine = [c for c in choices[2:] if c["index"] == i]
            assert mine == [{"index": i, "delta": {"content": "Hi"}, "logprobs": None, "finish_reason": None},
                            {"index": i, "delta": {}, "logprobs": None, "finish_reason": "stop"}]  # fmt: skip

    run(check, tmp_path)


def test_a_failure_after_the_stream_started_is_an_error_event_then_done(tmp_path):
    async def check(s: Server) -> None:
        model = GenModel(s.registry, [chunk("a", [1], done=1)])
        model.fail_after = QueueFull("the KV cache budget is full")
        body = {"model": "mnist", "prompt": "x", "stream": True}
        got = events((await s.inference.post("/v1/completions", json=body)).content)
        assert got[0]["choices"][0]["text"] == "a" and got[-1] == "[DONE]"
        assert got[1] == {"error": {"message": "the KV cache budget is full", "type": "server_error", "param": None,
                                    "code": "service_unavailable"}}  # fmt: skip
        assert model.closed == 1  # the model's chunk iterator was closed

    run(check, tmp_path)


def test_errors_before_the_stream_are_http_statuses_in_openai_shape(tmp_path):
    async def check(s: Server) -> None:
        cases = [(400, "prompt (9 tokens) + max_tokens (16) > max_model_len (8): lower max_tokens"),
                 (429, "too many requests waiting"), (503, "queue full")]  # fmt: skip
        for status, message in cases:
            s.registry.responder = refusing(status, message)
            for stream in (False, True):
                r = await s.inference.post("/v1/completions", json={"model": "mnist", "prompt": "x", "stream": stream})
                assert r.status_code == status and r.headers["content-type"] == "application/json"
                assert r.json()["error"]["message"] == message
        kinds = {400: "invalid_request_error", 429: "rate_limit_error", 503: "server_error"}
        for status, kind in kinds.items():
            s.registry.responder = refusing(status, "m")
            r = await s.inference.post(
                "/v1/chat/completions", json={"model": "mnist", "messages": [{"role": "user", "content": "x"}]}
            )
            assert r.status_code == status and r.json()["error"]["type"] == kind
        r = await s.inference.post("/v1/completions", json={"model": "nope", "prompt": "x"})
        assert r.status_code == 404 and r.json() == {
            "error": {
                "message": "Model not found: nope",
                "type": "invalid_request_error",
                "param": None,
                "code": "model_not_found",
            }
        }

    run(check, tmp_path)


def test_an_answer_that_is_not_the_wire_is_a_400_naming_the_model(tmp_path):
    async def check(s: Server) -> None:
        r = await s.inference.post("/v1/completions", json={"model": "mnist", "prompt": "x"})  # fakes' {"ok": true}
        assert r.status_code == 200  # a dict is a chunk without text: ""
        s.registry.responder = refusing(200, "x")

        async def classifier(job: Any) -> Any:
            from serve.batching import InferenceResponse

            return InferenceResponse(body=b"[0.1, 0.9]")

        s.registry.responder = classifier
        r = await s.inference.post("/v1/completions", json={"model": "mnist", "prompt": "x"})
        assert r.status_code == 400 and "'mnist' did not answer the generative wire" in r.json()["error"]["message"]

    run(check, tmp_path)
