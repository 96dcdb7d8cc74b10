"""The request bodies of `/v1/completions`, `/v1/chat/completions` and `/v1/embeddings`, as pydantic models.

Field names, defaults and ranges are OpenAI's, with vLLM's extras (`top_k`, `min_p`, `repetition_penalty`,
`ignore_eos`, `min_tokens`, `stop_token_ids`) that clients send in `extra_body`.

Decisions:
- Unknown fields are refused (400 naming the field, errors.py): a field we silently ignored would change nothing
  the client asked for. Fields OpenAI has that serve does not implement (`tools`, `response_format`, `logit_bias`,
  `functions`, `suffix`, `best_of`, `dimensions`, ...) are refused the same way unless their value asks for
  nothing (`tools: []`, `tool_choice: "none"`, `response_format: {"type": "text"}`, `logit_bias: {}`); `user`,
  `metadata`, `store: false`, `parallel_tool_calls` change no output and are accepted.
- Only the sampling fields the client set reach the model (`model_fields_set`), so the model's own
  generation_config defaults apply to the rest; `/v1/completions`' `max_tokens` defaults to 16 (OpenAI's, vLLM's).
- `n` is capped at MAX_N: each choice is a request of its own (wire.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from serve.frontends.openai.errors import InvalidField

MAX_N = 16
MAX_LOGPROBS = 20
COMPLETIONS_MAX_TOKENS = 16

# field -> values that ask for nothing; any other value is refused as unsupported
UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "logit_bias": (None, {}),
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "functions": (None, []),
    "function_call": (None, "none"),
    "response_format": (None, {"type": "text"}),
    "suffix": (None, ""),
    "best_of": (None, 1),
    "store": (None, False),
    "prediction": (None,),
    "audio": (None,),
    "modalities": (None, ["text"]),
    "reasoning_effort": (None,),
    "dimensions": (None,),
    "web_search_options": (None,),
}
HARMLESS = ("user", "metadata", "parallel_tool_calls", "service_tier")


class Request(BaseModel):
    """What every body may carry."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None  # required at /v1/...; the path names the model under /predictions/{m}/.../v1
    user: str | None = None
    metadata: dict[str, str] | None = None
    parallel_tool_calls: bool | None = None
    service_tier: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _refuse_unsupported(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for name, harmless in UNSUPPORTED.items():
            if name in data:
                value = data[name]
                if not any(value == ok and type(value) is type(ok) for ok in harmless):
                    raise InvalidField(f"{name}={_short(value)} is not supported by serve yet; remove {name!r} "
                                       "from the request", name)  # fmt: skip
        return {k: v for k, v in data.items() if k not in UNSUPPORTED}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM's: with include_usage, every chunk carries the usage so far


class Sampling(Request):
    """The sampling fields both generating endpoints take."""

    max_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    seed: int | None = None
    n: int = Field(1, ge=1, le=MAX_N)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    # vLLM's extras (extra_body)
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0)
    ignore_eos: bool | None = None
    min_tokens: int | None = Field(None, ge=0)
    stop_token_ids: list[int] | None = None

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> Sampling:
        if self.stream_options is not None and not self.stream:
            raise InvalidField("stream_options is only allowed with stream=true", "stream_options")
        return self

    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def continuous_usage(self) -> bool:
        """Every chunk carries the usage so far (vLLM's `continuous_usage_stats`, only with include_usage)."""
        return self.include_usage() and self.stream_options is not None and self.stream_options.continuous_usage_stats

    def sampling(self) -> dict[str, Any]:
        """The wire's `sampling` object: the fields the client set, in the engine's names (gen_contract.md)."""
        names = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                 "frequency_penalty", "seed", "ignore_eos", "min_tokens", "stop_token_ids")  # fmt: skip
        out = {name: getattr(self, name) for name in names if name in self.model_fields_set}
        out = {name: value for name, value in out.items() if value is not None}
        if out.get("top_k") == -1:  # vLLM's "off"; the engine's is 0
            out["top_k"] = 0
        if self.stop is not None:
            out["stop"] = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        return out


class CompletionRequest(Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False

    @model_validator(mode="after")
    def _check(self) -> CompletionRequest:
        if isinstance(self.prompt, list) and (not self.prompt or any(p in ("", []) for p in self.prompt)):
            raise InvalidField("prompt must not be empty (nor hold an empty prompt)", "prompt")
        if self.echo and self.logprobs is not None:
            raise InvalidField("echo with logprobs needs the prompt's logprobs, which serve does not compute yet: "
                               "drop one of them", "echo")  # fmt: skip
        return self

    def prompts(self) -> list[dict[str, Any]]:
        """One wire prompt per entry: `{"prompt": text}` or `{"prompt_token_ids": ids}`."""
        p = self.prompt
        if isinstance(p, str):
            return [{"prompt": p}]
        if all(isinstance(x, int) for x in p):
            return [{"prompt_token_ids": list(p)}]
        return [{"prompt_token_ids": list(x)} if isinstance(x, list) else {"prompt": x} for x in p]

    def sampling(self) -> dict[str, Any]:
        out = super().sampling()
        out.setdefault("max_tokens", COMPLETIONS_MAX_TOKENS)
        if self.logprobs is not None:
            out["logprobs"] = self.logprobs
        return out


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def wire(self) -> dict[str, Any]:
        content = self.content
        if isinstance(content, list):
            content = "".join(part.text for part in content)
        out: dict[str, Any] = {"role": self.role, "content": content or ""}
        if self.name is not None:
            out["name"] = self.name
        return out


class ChatCompletionRequest(Sampling):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=0)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)

    @model_validator(mode="before")
    @classmethod
    def _text_only(cls, data: Any) -> Any:
        messages = data.get("messages") if isinstance(data, dict) else None
        for i, message in enumerate(messages if isinstance(messages, list) else []):
            content = message.get("content") if isinstance(message, dict) else None
            for j, part in enumerate(content if isinstance(content, list) else []):
                kind = part.get("type") if isinstance(part, dict) else None
                if kind != "text":
                    raise InvalidField(f"content part type {kind!r} is not supported: serve's chat models take text "
                                       'parts only ({"type": "text", "text": "..."})',
                                       f"messages.{i}.content.{j}.type")  # fmt: skip
        return data

    @model_validator(mode="after")
    def _check(self) -> ChatCompletionRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise InvalidField("top_logprobs needs logprobs=true", "top_logprobs")
        return self

    def sampling(self) -> dict[str, Any]:
        out = super().sampling()
        if self.max_completion_tokens is not None:  # OpenAI's newer name wins over the deprecated max_tokens
            out["max_tokens"] = self.max_completion_tokens
        if self.logprobs:
            out["logprobs"] = self.top_logprobs or 0
        return out


class EmbeddingRequest(Request):
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"

    @model_validator(mode="before")
    @classmethod
    def _refuse_token_ids(cls, data: Any) -> Any:
        value = data.get("input") if isinstance(data, dict) else None
        if isinstance(value, list) and value and not isinstance(value[0], str):
            raise InvalidField("input as token ids is not supported: the embedding handlers tokenize themselves, "
                               "so send the texts (a string or a list of strings)", "input")  # fmt: skip
        return data

    @model_validator(mode="after")
    def _check(self) -> EmbeddingRequest:
        if isinstance(self.input, list) and not self.input:
            raise InvalidField("input must not be empty", "input")
        return self

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
