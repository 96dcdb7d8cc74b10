"""How one request wants its tokens chosen and when its generation ends: `SamplingParams`.

    params = SamplingParams.from_request({"temperature": 0.7, "stop": "\\n"}, defaults=generation_defaults)
    params.validate()   # ValueError naming the field, its value and the allowed range

Decisions, and why:
- The field names and ranges are OpenAI's where OpenAI has the field (temperature 0..2, top_p (0, 1], presence and
  frequency penalties -2..2, logprobs 0..20, n >= 1), vLLM's for its extras (top_k, min_p, repetition_penalty,
  min_tokens, stop_token_ids, ignore_eos): clients move between servers with the same bodies.
- `temperature == 0` is greedy (OpenAI's and vLLM's convention), not a division by zero.
- `top_k` 0 or -1 means off (the wire's 0, vLLM's -1), so both clients' "off" are accepted.
- `max_tokens=None` means "as many as `max_model_len` allows" (vLLM's); the engine resolves it per request.
- Defaults come from the model's generation_config.json (the model's author chose them) and are overridden by what
  the request says, field by field; a request field we do not know is refused, never silently ignored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SamplingParams"]

# generation_config.json's names -> ours (what a model's author may set as the default)
_DEFAULT_NAMES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                  "repetition_penalty": "repetition_penalty", "max_new_tokens": "max_tokens"}  # fmt: skip


@dataclass
class SamplingParams:
    max_tokens: int | None = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = field(default_factory=tuple)
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)
    ignore_eos: bool = False
    min_tokens: int = 0
    logprobs: int | None = None
    n: int = 1

    def __post_init__(self) -> None:
        # the wire sends lists, and OpenAI allows one string for `stop`
        self.stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        self.stop_token_ids = tuple(self.stop_token_ids or ())

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @classmethod
    def from_request(cls, fields: Mapping[str, Any] | None, defaults: Any = None) -> SamplingParams:
        """The request's sampling `fields` over the model's `defaults` (an object or a mapping with
        generation_config.json's names: temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens, or
        ours: max_tokens; absent or None ones are skipped), validated."""
        known = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for theirs, ours in _DEFAULT_NAMES.items():
            for name in (theirs, ours):  # GenerationDefaults' names, or ours (its sampling_defaults())
                value = defaults.get(name) if isinstance(defaults, Mapping) else getattr(defaults, name, None)
                if value is not None:
                    values[ours] = value
        for name, value in (fields or {}).items():
            if name not in known:
                raise ValueError(f"unknown sampling field {name!r}; the known ones are {', '.join(sorted(known))}")
            if value is not None or name in ("max_tokens", "seed", "logprobs"):
                values[name] = value
        params = cls(**values)
        params.validate()
        return params

    def validate(self) -> None:
        """Raise ValueError naming the first field out of its range, with its value and the range."""
        _check_int("n", self.n, 1)
        if self.max_tokens is not None:
            _check_int("max_tokens", self.max_tokens, 1)
        _check_int("min_tokens", self.min_tokens, 0)
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens ({self.min_tokens}) must be at most max_tokens ({self.max_tokens})")
        _check_range("temperature", self.temperature, 0.0, 2.0)
        _check_number("top_p", self.top_p)
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        _check_int("top_k", self.top_k, -1)
        _check_range("min_p", self.min_p, 0.0, 1.0)
        _check_number("repetition_penalty", self.repetition_penalty)
        if not 0.0 < self.repetition_penalty < float("inf"):
            raise ValueError(f"repetition_penalty must be > 0 (1 is off), got {self.repetition_penalty}")
        _check_range("presence_penalty", self.presence_penalty, -2.0, 2.0)
        _check_range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"seed must be an integer or null, got {self.seed!r}")
        if self.logprobs is not None:
            _check_int("logprobs", self.logprobs, 0, 20)
        for s in self.stop:
            if not isinstance(s, str) or not s:
                raise ValueError(f"stop must be non-empty strings, got {s!r}")
        for t in self.stop_token_ids:
            _check_int("stop_token_ids", t, 0)
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be true or false, got {self.ignore_eos!r}")


def _check_number(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ValueError(f"{name} must be a number, got {value!r}")


def _check_range(name: str, value: Any, low: float, high: float) -> None:
    _check_number(name, value)
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low:g}, {high:g}], got {value}")


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {bound}, got {value}")
