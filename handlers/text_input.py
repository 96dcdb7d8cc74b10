"""Text requests for the text handlers (text_embedding, text_classifier): decoding, tokenizer, batch encoding.

A request's text is one of:
- the body as UTF-8 text (bytes or str), e.g. `curl -d "A man is eating food."`;
- a JSON object `{"text": "..."}` or, as Hugging Face's inference API, `{"inputs": "..."}`: as bytes/str that
  start with "{" and parse as JSON, or as the dict the frontend already parsed (`Content-Type: application/json`).
  Text that starts with "{" but is not valid JSON is taken as plain text.
One text per request: the server batches requests, so a list under "text"/"inputs" is refused with a 400.
Empty or blank text and bytes that are not UTF-8 are refused with a 400 too.

The tokenizer is `tokenizer.json` from the model directory (Hugging Face `tokenizers`), truncating at
`max_length` tokens (special tokens included) and padding to the longest text of the batch, with the pad token
and side (right, or left for models that read the last state of a sequence) that the file names.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

import serve
from serve.errors import InvalidInput

TEXT_FIELDS = ("text", "inputs")


def decode_text(payload: Any) -> str:
    """The text of one request (see the module docstring); InvalidInput says what was wrong."""
    if isinstance(payload, (bytes, bytearray)):
        try:
            payload = bytes(payload).decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidInput(
                f"the request body is not UTF-8 text (byte 0x{payload[e.start]:02x} at position {e.start}): "
                "send the text encoded as UTF-8"
            ) from None
    if isinstance(payload, str) and payload.lstrip().startswith("{"):
        with contextlib.suppress(json.JSONDecodeError):  # else: text that merely starts with a brace
            payload = json.loads(payload)
    if isinstance(payload, dict):
        payload = _text_field(payload)
    if not isinstance(payload, str):
        raise InvalidInput(f'expected text, got {type(payload).__name__}: send UTF-8 text or {{"text": "..."}}')
    if not payload.strip():
        raise InvalidInput("the text is empty: send at least one non-blank character")
    return payload


def _text_field(obj: dict[str, Any]) -> Any:
    for key in TEXT_FIELDS:
        if key in obj:
            value = obj[key]
            if isinstance(value, list):
                raise InvalidInput(
                    f"{key!r} holds a list: send one text per request (the server batches requests itself)"
                )
            return value
    raise InvalidInput(f"a JSON request needs a 'text' (or 'inputs') string field, got the keys {sorted(obj)}")


def load_tokenizer(model_dir: str | Path, max_length: int) -> Tokenizer:
    """`tokenizer.json` from the model directory, truncating at `max_length` and padding to the batch's longest."""
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"no tokenizer.json in the model directory {path.parent}: add it to the archive with "
            "model-archiver --extra-files tokenizer.json"
        )
    tokenizer = Tokenizer.from_file(str(path))
    pad = tokenizer.padding or {}
    # the file's own settings (often fixed-length padding to 128) are replaced by the handler's
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(pad_id=pad.get("pad_id", 0), pad_token=pad.get("pad_token", "[PAD]"),
                             direction=str(pad.get("direction", "right")).lower())  # fmt: skip
    return tokenizer


def encode_batch(tokenizer: Tokenizer, texts: list[str]) -> tuple[serve.Tensor, serve.Tensor]:
    """(input_ids, attention_mask), both int64 (batch, longest text in tokens)."""
    encodings = tokenizer.encode_batch(texts)
    input_ids = serve.tensor([e.ids for e in encodings], dtype=serve.int64)
    attention_mask = serve.tensor([e.attention_mask for e in encodings], dtype=serve.int64)
    return input_ids, attention_mask


def example_ids(tokenizer: Tokenizer, batch_size: int, length: int) -> tuple[serve.Tensor, serve.Tensor]:
    """(input_ids, attention_mask) for warm-up, both int64 (batch_size, length): seeded ids from the tokenizer's
    vocabulary, every position attended."""
    ids = np.random.default_rng(0).integers(0, max(tokenizer.get_vocab_size(), 1), (batch_size, length))
    return serve.from_numpy(ids.astype(np.int64)), serve.ones(batch_size, length, dtype=serve.int64)


def positive_int(config: dict[str, Any], key: str, default: int) -> int:
    """A model-config `handler:` setting that must be a positive integer."""
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"model-config handler.{key} must be a positive integer, got {value!r}")
    return value


def flag(config: dict[str, Any], key: str, default: bool) -> bool:
    """A model-config `handler:` setting that must be true or false."""
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"model-config handler.{key} must be true or false, got {value!r}")
    return value
