"""A Hugging Face folder's tokenizer: tokenizer.json through the `tokenizers` library, with tokenizer_config.json's
special tokens, BOS/EOS settings and chat template read the way transformers 5 reads them.

Decisions, and why:
- The `tokenizers` library does the encoding (the same Rust code transformers' fast tokenizers run), so ids match
  by construction. BOS/EOS come from tokenizer.json's post-processor alone: transformers 5 drops
  tokenizer_config.json's `add_bos_token` / `add_eos_token` when the folder has a tokenizer.json, and so do we.
- The chat template is `chat_template.jinja` when the folder has one (what transformers 5 saves), else
  tokenizer_config.json's `chat_template` (a string, or named templates of which "default" is used).
- decode: `clean_up_tokenization_spaces` is applied only for non-BPE models, as transformers 5 does (it corrupts
  BPE text).
- eos_token_ids: the tokenizer's eos token and generation_config.json's eos_token_id (an int or a list), because
  chat models end turns with a token generation_config names (Llama 3's <|eot_id|>) beside the tokenizer's eos.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as _Backend

from serve.errors import CheckpointError
from serve.zoo.decoders.chat_template import render_chat_template
from serve.zoo.decoders.config import read_json
from serve.zoo.decoders.generation_config import GenerationDefaults

__all__ = ["Tokenizer"]

SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_CLEANUPS = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
             (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))  # fmt: skip


class Tokenizer:
    def __init__(
        self, backend: _Backend, config: dict[str, Any], chat_template: str | None, eos_ids: list[int]
    ) -> None:
        self._backend = backend
        self.special_tokens = {k: t for k in SPECIAL if (t := _token_text(config.get(k))) is not None}
        self.bos_token, self.eos_token = self.special_tokens.get("bos_token"), self.special_tokens.get("eos_token")
        self.chat_template = chat_template
        self._cleanup = bool(config.get("clean_up_tokenization_spaces", False))
        self._cleanup &= type(backend.model).__name__ != "BPE"
        eos = {self._id(self.eos_token)} if self.eos_token is not None else set()
        self.eos_token_ids: frozenset[int] = frozenset(eos | set(eos_ids))

    @classmethod
    def from_folder(cls, folder: str | Path) -> Tokenizer:
        path = Path(folder)
        if not (path / "tokenizer.json").is_file():
            raise CheckpointError(f"tokenizer.json: not found in {path} (serve reads fast tokenizers' tokenizer.json)")
        try:
            backend = _Backend.from_file(str(path / "tokenizer.json"))
        except Exception as e:  # the library raises its own Exception types for any malformed file
            raise CheckpointError(f"tokenizer.json: the tokenizers library cannot read it ({e})") from None
        config = read_json(path / "tokenizer_config.json", required=False)
        config = {**read_json(path / "special_tokens_map.json", required=False), **config}
        return cls(
            backend, config, _chat_template(path, config), GenerationDefaults.from_folder(path).eos_token_ids or []
        )

    @property
    def vocab_size(self) -> int:
        return int(self._backend.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        text = str(self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens))
        if self._cleanup:
            for before, after in _CLEANUPS:
                text = text.replace(before, after)
        return text

    def id_to_token(self, token_id: int) -> str:
        token = self._backend.id_to_token(int(token_id))
        if token is None:
            raise ValueError(f"token id {token_id} is not in the vocabulary (size {self.vocab_size})")
        return str(token)

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        if self.chat_template is None:
            raise ValueError(
                "this model has no chat template (no chat_template.jinja, and no chat_template in "
                "tokenizer_config.json): send a prompt (completions) instead of messages"
            )
        return render_chat_template(self.chat_template, messages, add_generation_prompt, self.special_tokens)

    def _id(self, token: str) -> int:
        token_id = self._backend.token_to_id(token)
        if token_id is None:
            raise CheckpointError(f"tokenizer_config.json: the special token {token!r} is not in tokenizer.json")
        return int(token_id)


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken object with "content"."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _chat_template(folder: Path, config: dict[str, Any]) -> str | None:
    if (folder / "chat_template.jinja").is_file():
        return (folder / "chat_template.jinja").read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": "..."}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if template is not None and not isinstance(template, str):
        raise CheckpointError("tokenizer_config.json: 'chat_template' must be a string or a list of named templates")
    return template
