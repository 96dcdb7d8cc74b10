"""What the OpenAI answers are made of: token usage over the choices, and logprobs in OpenAI's two shapes.

The wire's logprobs (gen_contract.md) are one entry per generated token, `{"token", "token_id", "logprob",
"top_logprobs": [{"token", "token_id", "logprob"}]}`. They become
- `/v1/completions`' legacy shape: `{"tokens": [...], "token_logprobs": [...], "top_logprobs": [{token: logprob}],
  "text_offset": [...]}`, offsets in characters into the choice's text (after the echoed prompt); `top_logprobs`
  entries are null when `logprobs=0` asked for none (vLLM's answer);
- chat's: `{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}`, with
  `bytes` the token's UTF-8 bytes as OpenAI sends them.

Usage: `prompt_tokens` counts each prompt once whatever `n` is (as vLLM does), `completion_tokens` every choice's
tokens: the model's running `completion_tokens` when it reports one, else the token ids it sent.
"""

from __future__ import annotations

from typing import Any

from serve.frontends.openai.wire import Chunk


class Usage:
    """Token counts over the chunks of `n` choices per prompt (choice index // n is the prompt)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.prompt: dict[int, int] = {}
        self.reported: dict[int, int] = {}
        self.counted: dict[int, int] = {}

    def add(self, chunk: Chunk) -> None:
        if chunk.prompt_tokens is not None:
            self.prompt[chunk.index // self.n] = chunk.prompt_tokens
        if chunk.completion_tokens is not None:
            self.reported[chunk.index] = chunk.completion_tokens
        self.counted[chunk.index] = self.counted.get(chunk.index, 0) + len(chunk.token_ids)

    def body(self) -> dict[str, int]:
        prompt = sum(self.prompt.values())
        completion = sum(self.reported.get(i, counted) for i, counted in self.counted.items())
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class CompletionLogprobs:
    """One choice's legacy logprobs, built chunk by chunk (`text_offset` runs on across chunks)."""

    def __init__(self, top: int, offset: int = 0) -> None:
        self.top = top
        self.offset = offset

    def shape(self, entries: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for entry in entries:
            token = str(entry.get("token", ""))
            out["tokens"].append(token)
            out["token_logprobs"].append(entry.get("logprob"))
            tops = entry.get("top_logprobs") or []
            out["top_logprobs"].append({str(t.get("token", "")): t.get("logprob") for t in tops} if self.top else None)
            out["text_offset"].append(self.offset)
            self.offset += len(token)
        return out

    def advance(self, text: str) -> None:
        """Text that has no logprobs (the echoed prompt) still moves the offsets."""
        self.offset += len(text)


def merged_completion_logprobs(parts: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not parts:
        return None
    return {key: [value for part in parts for value in part[key]] for key in parts[0]}


def chat_logprobs(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**_chat_token(entry), "top_logprobs": [_chat_token(t) for t in entry.get("top_logprobs") or []]}
            for entry in entries]  # fmt: skip


def _chat_token(entry: dict[str, Any]) -> dict[str, Any]:
    token = str(entry.get("token", ""))
    return {"token": token, "logprob": entry.get("logprob"), "bytes": list(token.encode("utf-8"))}
