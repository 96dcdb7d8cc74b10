"""`POST /v1/chat/completions`: messages to wire requests (the model applies its chat template), chunks to
`chat.completion` answers, whole or as `chat.completion.chunk` events.

Streamed, every choice first gets a delta `{"role": "assistant", "content": ""}` (as OpenAI and vLLM send it
before any token), then `{"content": text}` deltas; the model's last chunk carries `finish_reason` (its delta empty
when it has no text). `include_usage` frames as in completions.py.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response

from serve.frontends.openai.choices import Usage, chat_logprobs
from serve.frontends.openai.schemas import ChatCompletionRequest
from serve.frontends.openai.sse import streaming_response
from serve.frontends.openai.wire import Chunk, Target, request_body, seeded

ROLE = "assistant"


async def create(target: Target, request: ChatCompletionRequest, model_name: str) -> Response | dict[str, Any]:
    sampling = request.sampling()
    source = {"messages": [m.wire() for m in request.messages]}
    chunks = await target.generate([request_body(source, seeded(sampling, i)) for i in range(request.n)])
    rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    if request.stream:
        head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model_name}
        return streaming_response(_events(chunks, head, request))
    return await _whole(chunks, {"id": rid, "object": "chat.completion", "created": created, "model": model_name},
                        request)  # fmt: skip


def _logprobs(chunk: Chunk, request: ChatCompletionRequest) -> dict[str, Any] | None:
    return {"content": chat_logprobs(chunk.logprobs or [])} if request.logprobs else None


async def _whole(chunks: AsyncIterator[Chunk], head: dict[str, Any],
                 request: ChatCompletionRequest) -> dict[str, Any]:  # fmt: skip
    usage = Usage(request.n)
    texts: dict[int, list[str]] = {i: [] for i in range(request.n)}
    logprobs: dict[int, list[dict[str, Any]]] = {i: [] for i in range(request.n)}
    finish: dict[int, str | None] = {}
    async for chunk in chunks:
        usage.add(chunk)
        texts[chunk.index].append(chunk.text)
        logprobs[chunk.index] += chat_logprobs(chunk.logprobs or [])
        finish[chunk.index] = chunk.finish_reason or finish.get(chunk.index)
    choices = [{"index": i, "message": {"role": ROLE, "content": "".join(texts[i])},
                "logprobs": {"content": logprobs[i]} if request.logprobs else None,
                "finish_reason": finish.get(i)} for i in range(request.n)]  # fmt: skip
    return {**head, "choices": choices, "usage": usage.body()}


async def _events(chunks: AsyncIterator[Chunk], head: dict[str, Any],
                  request: ChatCompletionRequest) -> AsyncIterator[dict[str, Any]]:  # fmt: skip
    extra = {"usage": None} if request.include_usage() else {}
    usage = Usage(request.n)
    try:
        for i in range(request.n):
            first = {"index": i, "delta": {"role": ROLE, "content": ""}, "logprobs": None, "finish_reason": None}
            yield {**head, "choices": [first], **extra}
        async for chunk in chunks:
            usage.add(chunk)
            if not chunk.text and not chunk.finish_reason and not chunk.logprobs:
                continue  # nothing to tell (a token the detokenizer holds back)
            delta = {"content": chunk.text} if chunk.text else {}
            choice = {"index": chunk.index, "delta": delta, "logprobs": _logprobs(chunk, request),
                      "finish_reason": chunk.finish_reason}  # fmt: skip
            yield {**head, "choices": [choice], **({"usage": usage.body()} if request.continuous_usage() else extra)}
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
    if extra:
        yield {**head, "choices": [], "usage": usage.body()}
