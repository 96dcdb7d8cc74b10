"""generation_config.json's sampling defaults, for the engine's SamplingParams defaults.

Decisions, and why:
- vLLM's rule (`generation_config="auto"`): a value the model's authors wrote (temperature, top_p, top_k, min_p,
  repetition_penalty, max_new_tokens) becomes the model's default for a request that omits it; values absent stay
  None, so the engine's own defaults (OpenAI's) apply. `do_sample` is kept for information only: OpenAI clients
  choose greedy with temperature 0, not through the model's file.
- `eos_token_id` may be an int or a list (Llama 3 lists <|end_of_text|> and <|eot_id|>); both become a set.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from serve.errors import CheckpointError
from serve.zoo.decoders.config import read_json

__all__ = ["GenerationDefaults"]

FILE = "generation_config.json"


@dataclass(frozen=True)
class GenerationDefaults:
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    max_new_tokens: int | None = None
    max_length: int | None = None  # prompt + new tokens, transformers' older bound
    do_sample: bool | None = None
    eos_token_ids: list[int] | None = None

    @classmethod
    def from_folder(cls, folder: str | Path) -> GenerationDefaults:
        data = read_json(Path(folder) / FILE, required=False)
        values: dict[str, Any] = {}
        for f in fields(cls):
            key = "eos_token_id" if f.name == "eos_token_ids" else f.name
            value = data.get(key)
            if value is not None:
                values[f.name] = _check(key, value)
        return cls(**values)

    def sampling_defaults(self) -> dict[str, Any]:
        """The SamplingParams fields this file sets, by SamplingParams' names (max_new_tokens -> max_tokens)."""
        names = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                 "repetition_penalty": "repetition_penalty", "max_new_tokens": "max_tokens"}  # fmt: skip
        return {ours: getattr(self, f) for f, ours in names.items() if getattr(self, f) is not None}


def _check(key: str, value: Any) -> Any:
    if key == "eos_token_id":
        ids = [value] if isinstance(value, int) and not isinstance(value, bool) else value
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise CheckpointError(f"{FILE}: 'eos_token_id' must be an int or a list of ints, got {value!r}")
        return ids
    if key == "do_sample":
        if not isinstance(value, bool):
            raise CheckpointError(f"{FILE}: 'do_sample' must be true or false, got {value!r}")
        return value
    integer = key in ("top_k", "max_new_tokens", "max_length")
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise CheckpointError(f"{FILE}: '{key}' must be {'an integer' if integer else 'a number'}, got {value!r}")
    return value if integer else float(value)
