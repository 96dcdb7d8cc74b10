"""A fake generative model behind the fake registry: it records each wire request and answers chunks in the wire
format of gen_contract.md, from a script."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from serve.batching import InferenceRequest, InferenceResponse
from serve.errors import PredictionException
from tests.unit.frontends.fakes import FakeRegistry


def chunk(text: str, ids: list[int], finish: str | None = None, *, prompt: int = 3, done: int = 0,
          logprobs: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {"index": 0, "text": text, "token_ids": ids, "finish_reason": finish, "logprobs": logprobs,
            "prompt_tokens": prompt, "completion_tokens": done, **extra}  # fmt: skip


HELLO = [chunk("Hel", [1], done=1), chunk("lo", [2], "stop", done=2)]


class GenModel:
    """`script(wire_request) -> list of chunks` (or an exception to raise after them: `fail_after`)."""

    def __init__(self, registry: FakeRegistry, chunks: list[dict[str, Any]] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.jobs: list[InferenceRequest] = []
        self.chunks = HELLO if chunks is None else chunks
        self.fail_after: BaseException | None = None
        self.closed = 0
        registry.responder = self.respond

    async def respond(self, job: InferenceRequest) -> InferenceResponse:
        self.jobs.append(job)
        self.requests.append(json.loads(job.inputs["body"]))
        return InferenceResponse(chunks=self._stream(list(self.chunks), self.fail_after))

    async def _stream(self, chunks: list[dict[str, Any]], fail: BaseException | None) -> AsyncIterator[bytes]:
        try:
            for c in chunks:
                yield json.dumps(c).encode()
            if fail is not None:
                raise fail
        finally:
            self.closed += 1


def refusing(status: int, message: str) -> Any:
    async def respond(job: InferenceRequest) -> InferenceResponse:
        raise PredictionException(message, status)

    return respond
