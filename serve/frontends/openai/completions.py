"""`POST /v1/completions`: prompts to wire requests, chunks to `text_completion` answers (whole or streamed).

One wire request per (prompt, choice): prompt p's choice i has index p * n + i, as OpenAI and vLLM number them.
With `echo`, the model sends the prompt's text in its first chunk (`prompt_text`), which opens the choice's text.
Streamed, each chunk of the model is one event with that one choice; with `stream_options.include_usage` every
event carries `"usage": null` and a last event `{"choices": [], "usage": {...}}` follows (OpenAI's framing); with
vLLM's `continuous_usage_stats` too, each event carries the usage so far instead of null (what guidellm asks for).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response

from serve.frontends.openai.choices import CompletionLogprobs, Usage, merged_completion_logprobs
from serve.frontends.openai.schemas import CompletionRequest
from serve.frontends.openai.sse import streaming_response
from serve.frontends.openai.wire import Chunk, Target, request_body, seeded

OBJECT = "text_completion"


async def create(target: Target, request: CompletionRequest, model_name: str) -> Response | dict[str, Any]:
    sampling = request.sampling()
    bodies = [request_body(source, seeded(sampling, i), request.echo)
              for source in request.prompts() for i in range(request.n)]  # fmt: skip
    chunks = await target.generate(bodies)
    head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": OBJECT, "created": int(time.time()), "model": model_name}
    if request.stream:
        return streaming_response(_events(chunks, head, request))
    return await _whole(chunks, head, request)


class _Choice:
    def __init__(self, request: CompletionRequest) -> None:
        self.logprobs = CompletionLogprobs(request.logprobs or 0) if request.logprobs is not None else None

    def text_and_logprobs(self, chunk: Chunk) -> tuple[str, dict[str, Any] | None]:
        text = chunk.text
        if chunk.prompt_text:
            text = chunk.prompt_text + text
            if self.logprobs is not None:
                self.logprobs.advance(chunk.prompt_text)
        if self.logprobs is None:
            return text, None
        return text, self.logprobs.shape(chunk.logprobs or [])


async def _whole(chunks: AsyncIterator[Chunk], head: dict[str, Any], request: CompletionRequest) -> dict[str, Any]:
    usage = Usage(request.n)
    states: dict[int, _Choice] = {}
    texts: dict[int, list[str]] = {}
    logprobs: dict[int, list[dict[str, Any]]] = {}
    finish: dict[int, str | None] = {}
    async for chunk in chunks:
        usage.add(chunk)
        state = states.setdefault(chunk.index, _Choice(request))
        text, shaped = state.text_and_logprobs(chunk)
        texts.setdefault(chunk.index, []).append(text)
        if shaped is not None:
            logprobs.setdefault(chunk.index, []).append(shaped)
        finish[chunk.index] = chunk.finish_reason or finish.get(chunk.index)
    choices = [{"index": i, "text": "".join(texts[i]), "logprobs": merged_completion_logprobs(logprobs.get(i, [])),
                "finish_reason": finish[i]} for i in sorted(texts)]  # fmt: skip
    return {**head, "choices": choices, "usage": usage.body()}


async def _events(chunks: AsyncIterator[Chunk], head: dict[str, Any],
                  request: CompletionRequest) -> AsyncIterator[dict[str, Any]]:  # fmt: skip
    include_usage = request.include_usage()
    usage = Usage(request.n)
    states: dict[int, _Choice] = {}
    extra = {"usage": None} if include_usage else {}
    try:
        async for chunk in chunks:
            usage.add(chunk)
            text, shaped = states.setdefault(chunk.index, _Choice(request)).text_and_logprobs(chunk)
            if not text and not chunk.finish_reason and not chunk.logprobs:
                continue  # nothing to tell (a token the detokenizer holds back)
            choice = {"index": chunk.index, "text": text, "logprobs": shaped, "finish_reason": chunk.finish_reason}
            yield {**head, "choices": [choice], **({"usage": usage.body()} if request.continuous_usage() else extra)}
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
    if include_usage:
        yield {**head, "choices": [], "usage": usage.body()}
