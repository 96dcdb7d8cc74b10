"""The generative wire (gen_contract.md): one JSON request to the model, a stream of JSON chunks back.

    streams = await open_streams(dataplane, model, version, [body, ...], headers)   # errors raise here, before
    async for chunk in merge(streams): ...                                           # any byte is answered

Each body is one request through the dataplane (`predict`, the model's queue, its worker), with
`Content-Type: application/json` and decoded input, so the handler sees the wire request as a dict. The model
answers chunks, each a JSON object `{"index", "text", "token_ids", "finish_reason", "logprobs", "prompt_tokens",
"completion_tokens", "prompt_text"?}`; a handler that does not stream may answer one such object (or a list of them)
as its whole body.

Decisions:
- Every request is awaited before any answer starts: a 400 from the model (prompt too long, bad sampling values),
  a full queue (503) or an unknown model (404) is an HTTP status, not an error event in a 200 stream.
- `n` choices and list prompts are one request each (the wire's `n` stays 1), merged as they come; a chunk's
  `index` is its request's place in the list, so choices interleave by index as OpenAI's and vLLM's do.
- Closing the merged iterator (the client went away) cancels the readers and closes every chunk iterator, which
  cancels the requests at the worker (serve/management/dispatch.py).
- An answer that is not the wire (a non-generative model) is a 400 naming the model: the client picked it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

from serve.batching import InferenceRequest, InferenceResponse, json_values
from serve.errors import InvalidInput, PredictionException
from serve.frontends.dataplane import DataPlane
from serve.frontends.oip.core import error_message
from serve.frontends.request_ids import new_request_id

JSON = "application/json"
DROPPED_HEADERS = ("content-length", "content-encoding", "transfer-encoding")


@dataclasses.dataclass
class Chunk:
    index: int
    text: str = ""
    token_ids: list[int] = dataclasses.field(default_factory=list)
    finish_reason: str | None = None
    logprobs: list[dict[str, Any]] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_text: str | None = None

    @classmethod
    def from_wire(cls, value: Any, model: str) -> Chunk:
        if not isinstance(value, dict) or not isinstance(value.get("text", ""), str):
            raise InvalidInput(f"model {model!r} did not answer the generative wire (a JSON object with 'text' per "
                               f"chunk, got {_short(value)}): is it a text-generation model?")  # fmt: skip
        return cls(index=int(value.get("index") or 0), text=value.get("text") or "",
                   token_ids=list(value.get("token_ids") or ()), finish_reason=value.get("finish_reason"),
                   logprobs=value.get("logprobs"), prompt_tokens=value.get("prompt_tokens"),
                   completion_tokens=value.get("completion_tokens"), prompt_text=value.get("prompt_text"))  # fmt: skip


def request_body(source: dict[str, Any], sampling: dict[str, Any], echo: bool = False) -> bytes:
    """The wire request: `source` is `{"prompt": ...}`, `{"prompt_token_ids": ...}` or `{"messages": ...}`."""
    body = {"prompt": None, "prompt_token_ids": None, "messages": None, **source, "sampling": sampling}
    if echo:
        body["echo"] = True
    return json.dumps(body).encode()


def seeded(sampling: dict[str, Any], i: int) -> dict[str, Any]:
    """Choice `i`'s sampling: seed + i when a seed is given, so the n choices differ yet repeat."""
    return {**sampling, "seed": sampling["seed"] + i} if sampling.get("seed") is not None else sampling


async def open_streams(dataplane: DataPlane, model: str, version: str | None, bodies: list[bytes],
                       headers: dict[str, str]) -> list[AsyncIterator[Chunk]]:  # fmt: skip
    """Send every body; once all are accepted, their chunk streams. The first failure closes the others."""
    results = await asyncio.gather(*(_open(dataplane, model, version, b, headers) for b in bodies),
                                   return_exceptions=True)  # fmt: skip
    streams = [r for r in results if not isinstance(r, BaseException)]
    failure = next((r for r in results if isinstance(r, BaseException)), None)
    if failure is not None:
        for stream in streams:
            await stream.aclose()  # type: ignore[attr-defined]
        raise failure
    return streams


async def _open(dataplane: DataPlane, model: str, version: str | None, body: bytes,
                headers: dict[str, str]) -> AsyncIterator[Chunk]:  # fmt: skip
    job_headers = {k: v for k, v in headers.items() if k not in DROPPED_HEADERS}
    job_headers |= {"content-type": JSON, "url_path": "", "explain": "False"}
    job = InferenceRequest(new_request_id(), {"body": body}, {"body": JSON}, job_headers, decode=True)
    response = await dataplane.predict(model, version, job)
    if response.status >= 400:
        raise PredictionException(error_message(await _whole(response)), response.status)
    return _chunks(response, model)


async def _whole(response: InferenceResponse) -> bytes:
    if response.chunks is None:
        return response.body
    try:
        return b"".join([chunk async for chunk in response.chunks])
    finally:
        await _close(response.chunks)


async def _chunks(response: InferenceResponse, model: str) -> AsyncIterator[Chunk]:
    raw_chunks = response.chunks
    try:
        if raw_chunks is None:
            for value in _decode(response.body, model):
                yield Chunk.from_wire(value, model)
            return
        async for raw in raw_chunks:
            for value in _decode(raw, model):
                yield Chunk.from_wire(value, model)
    finally:
        if raw_chunks is not None:
            await _close(raw_chunks)


def _decode(raw: bytes, model: str) -> list[Any]:
    try:
        value = json.loads(raw)
    except json_values.DECODE_ERRORS:
        raise InvalidInput(f"model {model!r} answered a chunk that is not JSON ({_short(raw)}): is it a "
                           "text-generation model?") from None  # fmt: skip
    return value if isinstance(value, list) else [value]


async def merge(streams: list[AsyncIterator[Chunk]]) -> AsyncIterator[Chunk]:
    """The chunks of every stream as they come, each `index` set to its stream's place; closing this closes all."""
    queue: asyncio.Queue[tuple[int, Chunk | BaseException | None]] = asyncio.Queue(maxsize=4 * len(streams))

    async def pump(i: int, stream: AsyncIterator[Chunk]) -> None:
        try:
            async for chunk in stream:
                await queue.put((i, chunk))
            await queue.put((i, None))
        except Exception as exc:  # the stream broke: its error goes to the reader, in order
            await queue.put((i, exc))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        left = len(streams)
        while left:
            i, item = await queue.get()
            if item is None:
                left -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                item.index = i
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for stream in streams:
            await _close(stream)


async def _close(iterator: AsyncIterator[Any]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclasses.dataclass
class Target:
    """The model a call goes to, and the client's headers (the handler sees them as a /predictions call would)."""

    dataplane: DataPlane
    model: str
    version: str | None
    headers: dict[str, str]

    async def generate(self, bodies: list[bytes]) -> AsyncIterator[Chunk]:
        """Every body sent and accepted, then their chunks merged (`index` = the body's place)."""
        return merge(await open_streams(self.dataplane, self.model, self.version, bodies, self.headers))
