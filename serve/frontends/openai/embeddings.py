"""`POST /v1/embeddings` over the embedding models serve already has (handlers/text_embedding.py, the MiniLM
example): each input text is one ordinary prediction (`{"text": ...}` as JSON), batched by the model's batcher
like any other; the answers become OpenAI's `{"object": "list", "data": [{"object": "embedding", "index",
"embedding"}], "model", "usage"}`.

Decisions:
- A model's answer is a list of floats, or `{"embedding": [...], "prompt_tokens": n}` for a handler that counts
  its tokens. Without a count, `prompt_tokens` is an estimate: ceil(UTF-8 bytes / 4) per text, OpenAI's rule of
  thumb of four characters per token (the frontend has no tokenizer). The estimate only feeds `usage`.
- `encoding_format: "base64"` is the embedding as little-endian float32 bytes, base64-encoded: what the OpenAI SDK
  asks for by default and decodes with numpy.
- Token ids as input are refused (schemas.py): the handlers tokenize the text themselves.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
from typing import Any

import numpy as np

from serve.batching import InferenceRequest, json_values
from serve.errors import InvalidInput, PredictionException
from serve.frontends.oip.core import error_message
from serve.frontends.openai.schemas import EmbeddingRequest
from serve.frontends.openai.wire import DROPPED_HEADERS, JSON, Target
from serve.frontends.request_ids import new_request_id


async def create(target: Target, request: EmbeddingRequest, model_name: str) -> dict[str, Any]:
    texts = request.texts()
    answers = await asyncio.gather(*(_embed(target, text) for text in texts))
    data = [{"object": "embedding", "index": i, "embedding": _encoded(vector, request.encoding_format)}
            for i, (vector, _) in enumerate(answers)]  # fmt: skip
    tokens = sum(count if count is not None else estimate(text) for text, (_, count) in zip(texts, answers))
    return {"object": "list", "data": data, "model": model_name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}  # fmt: skip


def estimate(text: str) -> int:
    return max(1, math.ceil(len(text.encode("utf-8")) / 4))


async def _embed(target: Target, text: str) -> tuple[list[float], int | None]:
    headers = {k: v for k, v in target.headers.items() if k not in DROPPED_HEADERS}
    headers |= {"content-type": JSON, "url_path": "", "explain": "False"}
    job = InferenceRequest(new_request_id(), {"body": json.dumps({"text": text}).encode()}, {"body": JSON},
                           headers, decode=True)  # fmt: skip
    response = await target.dataplane.predict(target.model, target.version, job)
    body = response.body
    if response.chunks is not None:
        body = b"".join([chunk async for chunk in response.chunks])
    if response.status >= 400:
        raise PredictionException(error_message(body), response.status)
    return _vector(body, target.model)


def _vector(body: bytes, model: str) -> tuple[list[float], int | None]:
    try:
        value = json.loads(body)
    except json_values.DECODE_ERRORS:
        value = None
    count = None
    if isinstance(value, dict):
        count = value.get("prompt_tokens")
        value = value.get("embedding")
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], list):
        value = value[0]  # a handler that answers a batch of one
    if not isinstance(value, list) or not all(isinstance(v, (int, float)) for v in value):
        raise InvalidInput(f"model {model!r} did not answer an embedding (a list of numbers) for /v1/embeddings: "
                           "is it an embedding model (handler text_embedding)?")  # fmt: skip
    return [float(v) for v in value], count if isinstance(count, int) else None


def _encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector
