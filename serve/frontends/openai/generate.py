"""The Open Inference Protocol's generate extension (Triton's, provisional there), over the same wire:

    POST /v2/models/{m}[/versions/{v}]/generate          {"text_input": "...", "parameters": {...}}
         -> {"model_name", "model_version", "text_output", "finish_reason"}
    POST /v2/models/{m}[/versions/{v}]/generate_stream   the same body -> SSE events, one per chunk, `text_output`
                                                         the chunk's text (no [DONE]: Triton sends none)

`parameters` takes the engine's sampling names (`max_tokens`, `temperature`, `top_p`, `top_k`, `min_p`,
`repetition_penalty`, `presence_penalty`, `frequency_penalty`, `seed`, `stop`, `stop_token_ids`, `ignore_eos`,
`min_tokens`), with OpenAI's ranges (schemas.Sampling); Triton's TensorRT-LLM clients put them beside
`text_input` instead, which is accepted too. `stream` in parameters is accepted (the route decides).
Errors are v2's `{"error": message}`: the status before the stream starts, an event after it (Triton's rule).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response

from serve.batching import json_values
from serve.errors import InvalidInput
from serve.frontends.errors import error_info
from serve.frontends.openai.schemas import Sampling
from serve.frontends.openai.sse import streaming_response
from serve.frontends.openai.wire import Chunk, Target, request_body

SAMPLING = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
            "frequency_penalty", "seed", "stop", "stop_token_ids", "ignore_eos", "min_tokens")  # fmt: skip


def parse(body: bytes) -> tuple[str, dict[str, Any]]:
    """`(text_input, sampling)` of a generate body; InvalidInput names what is wrong."""
    try:
        value = json.loads(body)
    except json_values.DECODE_ERRORS as e:
        raise InvalidInput(f'the body is not JSON ({json_values.decode_error_text(e)}): send {{"text_input": '
                           '"...", "parameters": {...}}') from None  # fmt: skip
    if not isinstance(value, dict) or not isinstance(value.get("text_input"), str):
        raise InvalidInput('the body must be {"text_input": "<prompt>", "parameters": {...}}')
    parameters = value.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise InvalidInput(f"parameters must be an object, got {type(parameters).__name__}")
    extra = {k: v for k, v in value.items() if k not in ("text_input", "parameters", "id")}
    fields = {**extra, **parameters}
    fields.pop("stream", None)
    unknown = sorted(set(fields) - set(SAMPLING))
    if unknown:
        raise InvalidInput(f"unsupported generate parameter(s) {unknown}: serve takes {list(SAMPLING)}")
    return value["text_input"], Sampling.model_validate(fields).sampling()


def error_event(exc: BaseException) -> dict[str, Any]:
    return {"error": error_info(exc).message}


async def generate(target: Target, body: bytes, version_name: str, stream: bool) -> Response | dict[str, Any]:
    text, sampling = parse(body)
    chunks = await target.generate([request_body({"prompt": text}, sampling)])
    head = {"model_name": target.model, "model_version": version_name}
    if stream:
        return streaming_response(_events(chunks, head), done=False, error=error_event)
    parts: list[str] = []
    finish = None
    async for chunk in chunks:
        parts.append(chunk.text)
        finish = chunk.finish_reason or finish
    return {**head, "text_output": "".join(parts), "finish_reason": finish}


async def _events(chunks: AsyncIterator[Chunk], head: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    try:
        async for chunk in chunks:
            if chunk.text or chunk.finish_reason:
                yield {**head, "text_output": chunk.text, "finish_reason": chunk.finish_reason}
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
