"""handlers/text_generation.py in-process, on the committed tinychat folder (examples/tinychat/model): the wire in,
chunks out through the continuous-mode `emit`, against transformers + torch's greedy `generate` on the same folder;
the wire's and the model-config's errors."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from handlers.text_generation import TextGenerationHandler, engine_config, size_in_bytes, wire_request
from serve.worker.context import Context
from tests.transformers_reference import needs_transformers, reference_transformers

FOLDER = Path(__file__).resolve().parents[3] / "examples" / "tinychat" / "model"
QUESTIONS = ["Count to 7.", "What colour is grass?", "What is the opposite of fast?", "Hello!"]


class Collector:
    """emit() for many requests: every chunk by request, and an event per finished request."""

    def __init__(self) -> None:
        self.chunks: dict[str, list[Any]] = {}
        self.errors: dict[str, tuple[int, str]] = {}
        self.done: dict[str, threading.Event] = {}

    def emit_for(self, request_id: str) -> Any:
        self.chunks[request_id], self.done[request_id] = [], threading.Event()

        def emit(body: Any, final: bool = False, code: int = 200) -> None:
            if code >= 400:
                self.errors[request_id] = (code, body)
            else:
                self.chunks[request_id].append(body)
            if final:
                self.done[request_id].set()

        return emit

    def text(self, request_id: str) -> str:
        assert self.done[request_id].wait(60), f"request {request_id} did not finish"
        return "".join(c["text"] for c in self.chunks[request_id])


@pytest.fixture(scope="module")
def handler() -> TextGenerationHandler:
    handler = TextGenerationHandler()
    config = {"handler": {"kv_cache_bytes": "4MiB", "max_num_batched_tokens": 16}}  # prompts span steps
    handler.initialize(Context("tinychat", str(FOLDER), {"model": {}}, 1, None, "0.1.0", model_yaml_config=config))
    return handler


def _chat(question: str) -> dict[str, Any]:
    sampling = {"temperature": 0, "max_tokens": 40}
    return {"body": {"messages": [{"role": "user", "content": question}], "sampling": sampling}}


@needs_transformers
def test_concurrent_chats_answer_what_transformers_greedy_generate_answers(handler: TextGenerationHandler) -> None:
    reference_transformers()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = AutoModelForCausalLM.from_pretrained(FOLDER), AutoTokenizer.from_pretrained(FOLDER)
    expected = []
    for question in QUESTIONS:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)["input_ids"]  # fmt: skip
        out = model.generate(ids, max_new_tokens=40, do_sample=False)
        expected.append(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
    collector = Collector()
    for i, question in enumerate(QUESTIONS):  # all in flight at once: one engine batch
        handler.submit(f"r{i}", _chat(question), handler.context, collector.emit_for(f"r{i}"))
    assert [collector.text(f"r{i}") for i in range(len(QUESTIONS))] == expected
    last = collector.chunks["r0"][-1]
    assert last["finish_reason"] == "stop" and last["completion_tokens"] == sum(
        len(c["token_ids"]) for c in collector.chunks["r0"])  # fmt: skip


def test_a_prompt_with_echo_and_max_tokens_ends_with_length(handler: TextGenerationHandler) -> None:
    collector = Collector()
    body = json.dumps({"prompt": "<|im_start|>user\nCount to 9.<|im_end|>\n<|im_start|>assistant\n", "echo": True,
                       "sampling": {"temperature": 0, "max_tokens": 3}})  # fmt: skip
    handler.submit("e", {"body": body.encode()}, handler.context, collector.emit_for("e"))
    assert collector.text("e") == "One, two"
    first, last = collector.chunks["e"][0], collector.chunks["e"][-1]
    assert first["prompt_text"].endswith("<|im_start|>assistant\n") and last["finish_reason"] == "length"
    assert last["completion_tokens"] == 3 and last["prompt_tokens"] == first["prompt_tokens"] > 0


@pytest.mark.parametrize(("body", "message"), [
    ({"prompt": "hi", "messages": []}, "exactly one of"),
    ({}, "exactly one of"),
    ({"prompt": "hi", "temperature": 0}, "unknown request field(s) temperature"),
    ({"prompt": "hi", "sampling": {"temperature": 3}}, "temperature must be in [0, 2]"),
    ({"prompt": "hi", "sampling": {"max_tokens": 600}}, "512"),  # beyond max_model_len
    ({"prompt_token_ids": [1, "a"]}, "prompt_token_ids must be a list of integers"),
    ({"prompt_token_ids": [1, 99999]}, "prompt token ids must be in [0, 512)"),
    ({"messages": "hi"}, "messages must be a list"),
])  # fmt: skip
def test_a_bad_request_is_a_400_naming_what_to_change(handler: TextGenerationHandler, body: dict[str, Any],
                                                       message: str) -> None:  # fmt: skip
    collector = Collector()
    handler.submit("bad", {"body": body}, handler.context, collector.emit_for("bad"))
    assert collector.done["bad"].is_set()
    code, text = collector.errors["bad"]
    assert code == 400 and message in text, text


def test_cancel_finishes_the_request_with_abort(handler: TextGenerationHandler,
                                                monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    engine, gate = handler.engine.engine, threading.Event()
    step = engine.step

    def gated_step() -> Any:  # no step runs before the cancel: the request cannot finish first
        assert gate.wait(60)
        return step()

    monkeypatch.setattr(engine, "step", gated_step)
    collector = Collector()
    body = {"prompt": "Count", "sampling": {"max_tokens": 500, "ignore_eos": True, "temperature": 0}}
    handler.submit("c", {"body": body}, handler.context, collector.emit_for("c"))
    handler.cancel("c")
    gate.set()
    assert collector.done["c"].wait(60)
    assert collector.chunks["c"][-1]["finish_reason"] == "abort"
    assert collector.chunks["c"][-1]["completion_tokens"] == 0


def test_engine_settings_from_the_model_config() -> None:
    config = engine_config({"max_num_seqs": 8, "kv_cache_bytes": "64MiB", "enable_prefix_caching": False})
    assert config.max_num_seqs == 8 and config.kv_cache_bytes == 64 << 20 and not config.enable_prefix_caching
    assert size_in_bytes("k", "2GiB") == 2 << 30 and size_in_bytes("k", "1000KB") == 10**6
    assert size_in_bytes("k", 4096) == 4096
    for settings, key in (({"max_num_seqs": 0}, "max_num_seqs"), ({"kv_cache_bytes": "lots"}, "kv_cache_bytes"),
                          ({"enable_prefix_caching": "yes"}, "enable_prefix_caching")):  # fmt: skip
        with pytest.raises(ValueError, match=key):
            engine_config(settings)


def test_the_wire_accepts_json_text_and_refuses_what_is_not_an_object() -> None:
    assert wire_request({"body": '{"prompt": "x"}'})["prompt"] == "x"
    with pytest.raises(ValueError, match="JSON object"):
        wire_request({"body": b"[1, 2]"})
    with pytest.raises(ValueError, match="JSON object"):
        wire_request({"body": b"not json"})


def test_past_max_waiting_a_request_is_a_503_and_the_queued_ones_still_finish(monkeypatch: pytest.MonkeyPatch) -> None:
    handler = TextGenerationHandler()
    config = {"handler": {"kv_cache_bytes": "1MiB", "max_num_seqs": 1, "max_waiting": 2}}
    handler.initialize(Context("tinychat", str(FOLDER), {"model": {}}, 1, None, "0.1.0", model_yaml_config=config))
    engine, gate = handler.engine.engine, threading.Event()
    step = engine.step

    def gated_step() -> Any:  # nothing runs until all three are submitted: two wait, the third finds no room
        assert gate.wait(60)
        return step()

    monkeypatch.setattr(engine, "step", gated_step)
    collector = Collector()
    for rid in ("a", "b", "c"):
        handler.submit(rid, _chat("Count to 2."), handler.context, collector.emit_for(rid))
    gate.set()
    assert collector.errors["c"][0] == 503 and "max_waiting 2" in collector.errors["c"][1]
    assert collector.text("a") == collector.text("b") == "One, two."


def test_model_config_quantization_int8_answers_from_int8_weights() -> None:
    """handler.quantization: int8 loads the weight-only int8 decoder (zoo/decoders/test_int8 holds its numbers);
    an unknown value fails initialize with the key's message."""
    from serve.backend.cpu_int8 import QuantizedWeight

    handler = TextGenerationHandler()
    config = {"handler": {"kv_cache_bytes": "1MiB", "quantization": "int8"}}
    handler.initialize(Context("tinychat", str(FOLDER), {"model": {}}, 1, None, "0.1.0", model_yaml_config=config))
    assert isinstance(handler.model.blocks[0].qkv._parts[0][2], QuantizedWeight)
    collector = Collector()
    handler.submit("q", _chat("Count to 2."), handler.context, collector.emit_for("q"))
    assert collector.text("q")  # it answers; the words may differ from float32's
    bad = TextGenerationHandler()
    config = {"handler": {"quantization": "int4"}}
    with pytest.raises(ValueError, match="quantization 'int4' is not supported"):
        bad.initialize(Context("tinychat", str(FOLDER), {"model": {}}, 1, None, "0.1.0", model_yaml_config=config))
