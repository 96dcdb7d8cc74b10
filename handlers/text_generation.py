"""`text_generation`: a Hugging Face decoder folder served by serve's own engine, token by token, with continuous
batching (the generative path of issue 25).

    model-archiver --model-name tinychat --version 1.0 --handler text_generation --config-file model-config.yaml \\
        --extra-files "model/config.json,model/model.safetensors,model/tokenizer.json,..."

The archive holds the folder's files as they are (config.json, model.safetensors or shards with their index,
generation_config.json, tokenizer.json, tokenizer_config.json with the chat template). The decoder is serve's
(serve/zoo/decoders), the engine serve's (serve/generation): no transformers, no PyTorch.

The handler runs in the worker's continuous mode (`continuous = True`, serve/worker/continuous.py): each request is
handed to the engine when it arrives and joins the running batch at the next step; every step's new text goes back
as one chunk per request. The request is the generative wire (JSON; the OpenAI routes of serve/frontends/openai
build it, a client may send it to /predictions/{model} too):

    {"prompt": "text" | "prompt_token_ids": [ids] | "messages": [{"role", "content"}], "sampling": {...}, "echo": false}

and each chunk `{"index", "text", "token_ids", "finish_reason", "logprobs", "prompt_tokens", "completion_tokens"}`
(`prompt_text` on the first when echo). A chat request's messages are rendered with the folder's chat template and
tokenized without adding special tokens (the template writes them), as transformers and vLLM do; a prompt is
tokenized with them. What the model cannot take (a prompt plus max_tokens beyond max_model_len, a bad sampling
value, no chat template) is a 400 naming what to change; a full queue is a 503. A request that does not say
`max_tokens` may run to `max_model_len` unless the model's generation_config sets `max_new_tokens`.

Model-config (`handler:` section; vLLM's names), each optional:
    max_model_len: 2048          # prompt + generated tokens; default the model's max_position_embeddings
    max_num_seqs: 64             # sequences decoding at once
    max_num_batched_tokens: 512  # tokens per step (prefill chunks and decodes together)
    kv_cache_bytes: 256MiB       # the paged KV cache's budget (an int, or a size with KiB/MiB/GiB)
    block_size: 16
    enable_prefix_caching: true
    max_waiting: 1024            # queued requests beyond the running ones
    prefill_step_cost: 32        # serve's own, unset by default: start a burst of prompts in groups (lower TTFT
                                 # p50, later last first token; serve/generation/scheduler.py)
    dtype: auto                  # the checkpoint's dtype where the CPU runs it (bfloat16 needs AVX512-BF16);
                                 # or float32, or bfloat16
    quantization: int8           # weight-only int8 products, quantised at load (a quarter of fp32's bytes per
                                 # token; logits move ~1%); default none

Metrics: vLLM's, prefixed `serve:` and labelled `model_name`, recorded per request as it finishes and from the
engine's stats at least every second while it delivers outputs (handlers/generation_metrics.py; the names and their
vLLM counterparts are in the README's metrics section).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from handlers.base_handler import BaseHandler
from handlers.generation_metrics import GenerationMetrics
from serve.errors import QueueFull
from serve.generation import AsyncLLMEngine, EngineConfig, LLMEngine, RequestOutput, SamplingParams
from serve.worker.context import Context
from serve.zoo.decoders import load_pretrained
from serve.zoo.decoders.generation_config import GenerationDefaults
from serve.zoo.decoders.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

SOURCES = ("prompt", "prompt_token_ids", "messages")
WIRE_FIELDS = {*SOURCES, "sampling", "echo"}
ENGINE_INTS = ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size", "max_waiting",
               "prefill_step_cost")  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]i?B)?\s*$", re.IGNORECASE)
_UNITS = {"kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


class BadRequest(ValueError):
    """The request cannot be served as sent (a 400 naming what to change)."""


class TextGenerationHandler(BaseHandler):
    continuous = True

    def initialize(self, context: Context) -> None:
        super().initialize(context)
        folder = self.model_dir
        self.tokenizer = Tokenizer.from_folder(folder)
        self.defaults = GenerationDefaults.from_folder(folder)
        config = engine_config(self.handler_config)
        engine = LLMEngine(self.model, self.tokenizer, config)
        self.engine = AsyncLLMEngine(engine)
        self.metrics = GenerationMetrics(context.metrics, context.model_name, engine)
        logger.info("text_generation: %s, max_model_len %d, %d KV blocks of %d tokens", type(self.model).__name__,
                    engine.max_model_len, engine.stats()["num_blocks"], config.block_size)  # fmt: skip

    def load_model(self, context: Context) -> Any:
        quantization, max_len = self.handler_config.get("quantization"), self.handler_config.get("max_model_len")
        return load_pretrained(self.model_dir, dtype=str(self.handler_config.get("dtype", "auto")),
                               quantization=None if quantization is None else str(quantization),
                               max_model_len=max_len if isinstance(max_len, int) else None)  # fmt: skip

    def convert_model(self, model: Any) -> Any:
        return model  # the decoder loads in its dtype (model-config handler.dtype)

    def submit(self, request_id: str, data: dict[str, Any], context: Context, emit: Any) -> None:
        timer = self.metrics.request()  # the arrival, before tokenization (vLLM's TTFT counts it)
        try:
            wire = wire_request(data)
            prompt, params = self.tokens(wire), self.sampling(wire.get("sampling") or {})
        except (BadRequest, ValueError) as e:
            emit(str(e), final=True, code=400)
            return
        echo = bool(wire.get("echo"))
        first = [True]

        def deliver(out: RequestOutput | BaseException) -> None:
            if isinstance(out, BaseException):
                timer.failed()
            else:
                timer.output(out)
            if isinstance(out, BaseException) or out.error is not None:
                error = out if isinstance(out, BaseException) else out.error
                emit(f"generation failed: {error}", final=True, code=500)
                return
            chunk = wire_chunk(out)
            if echo and first[0]:
                chunk["prompt_text"] = self.tokenizer.decode(prompt, skip_special_tokens=False)
            first[0] = False
            emit(chunk, final=out.finished)

        try:
            self.engine.add_request(request_id, prompt, params, callback=deliver)
        except QueueFull as e:
            emit(str(e), final=True, code=503)
        except ValueError as e:
            emit(str(e), final=True, code=400)

    def cancel(self, request_id: str) -> None:
        self.engine.abort(request_id)

    def sampling(self, fields: dict[str, Any]) -> SamplingParams:
        """The request's sampling over the model's generation_config; without max_tokens from either, the sequence
        may run to max_model_len (OpenAI's chat default; the completions route sends its 16 itself)."""
        if "max_tokens" not in fields and self.defaults.max_new_tokens is None:
            fields = {**fields, "max_tokens": None}
        return SamplingParams.from_request(fields, self.defaults)

    def tokens(self, wire: dict[str, Any]) -> list[int]:
        """The request's prompt as token ids (module docstring: how each source is tokenized)."""
        if wire.get("prompt_token_ids") is not None:
            ids = wire["prompt_token_ids"]
            if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
                raise BadRequest("prompt_token_ids must be a list of integers")
            return ids
        if wire.get("messages") is not None:
            messages = wire["messages"]
            if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                raise BadRequest("messages must be a list of {role, content} objects")
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
            return self.tokenizer.encode(text, add_special_tokens=False)
        prompt = wire.get("prompt")
        if not isinstance(prompt, str):
            raise BadRequest(f"prompt must be a string, got {type(prompt).__name__}")
        return self.tokenizer.encode(prompt, add_special_tokens=True)


def wire_request(data: dict[str, Any]) -> dict[str, Any]:
    """The wire request in what the worker hands `submit` (its body, decoded JSON or raw bytes)."""
    body = data.get("body", data.get("data"))
    if isinstance(body, (bytes, bytearray, str)):
        try:
            body = json.loads(body)
        except ValueError as e:
            raise BadRequest(f"the request must be a JSON object (the generative wire): {e}") from e
    if not isinstance(body, dict):
        raise BadRequest(f"the request must be a JSON object with one of {', '.join(SOURCES)}")
    unknown = sorted(set(body) - WIRE_FIELDS)
    if unknown:
        raise BadRequest(f"unknown request field(s) {', '.join(unknown)}; the known ones are "
                         f"{', '.join(sorted(WIRE_FIELDS))}")  # fmt: skip
    given = [s for s in SOURCES if body.get(s) is not None]
    if len(given) != 1:
        raise BadRequest(f"send exactly one of {', '.join(SOURCES)} (got {', '.join(given) or 'none'})")
    sampling = body.get("sampling")
    if sampling is not None and not isinstance(sampling, dict):
        raise BadRequest("sampling must be a JSON object of sampling fields")
    return body


def wire_chunk(out: RequestOutput) -> dict[str, Any]:
    return {"index": out.index, "text": out.new_text, "token_ids": out.new_token_ids,
            "finish_reason": out.finish_reason, "logprobs": out.logprobs, "prompt_tokens": out.prompt_tokens,
            "completion_tokens": out.completion_tokens}  # fmt: skip


def engine_config(settings: dict[str, Any]) -> EngineConfig:
    """EngineConfig from the model-config's handler section (module docstring); ValueError naming a bad key."""
    values: dict[str, Any] = {}
    for key in ENGINE_INTS:
        if settings.get(key) is not None:
            values[key] = _positive_int(key, settings[key])
    if settings.get("kv_cache_bytes") is not None:
        values["kv_cache_bytes"] = size_in_bytes("kv_cache_bytes", settings["kv_cache_bytes"])
    if settings.get("enable_prefix_caching") is not None:
        value = settings["enable_prefix_caching"]
        if not isinstance(value, bool):
            raise ValueError(f"model-config handler.enable_prefix_caching must be true or false, got {value!r}")
        values["enable_prefix_caching"] = value
    config = EngineConfig(**values)
    config.validate()
    return config


def size_in_bytes(key: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = _SIZE.match(str(value)) if isinstance(value, str) else None
    if match is None or int(match.group(1)) < 1:
        raise ValueError(f"model-config handler.{key} must be a positive number of bytes or a size such as 256MiB, "
                         f"got {value!r}")  # fmt: skip
    return int(match.group(1)) * _UNITS.get((match.group(2) or "").lower(), 1)


def _positive_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"model-config handler.{key} must be a positive integer, got {value!r}")
    return value
