"""`ts.torch_handler.text_handler.TextHandler`: TorchServe's base of the text handlers, on serve.

initialize loads the source vocabulary (manifest `model.sourceVocab`, else `source_vocab.pt` in the model
directory; a {token: index} dict, see handlers/text_vocab.py) into `self.source_vocab`, and `self.tokenizer` is
torchtext's basic_english. The cleaning helpers are TorchServe's: _remove_html_tags, _expand_contractions,
_remove_accented_characters, _remove_punctuation (and its old misspelling _remove_puncutation), _tokenize.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from handlers import text_vocab
from handlers.text_classifier import source_vocab_path
from serve.compat.ts.torch_handler.base_handler import BaseHandler
from serve.worker.context import Context


class TextHandler(BaseHandler):
    """TorchServe's TextHandler: the source vocabulary and the text cleaning helpers."""

    def __init__(self) -> None:
        super().__init__()
        self.source_vocab: dict[str, int] | None = None
        self.tokenizer = text_vocab.basic_english

    def initialize(self, context: Context) -> None:
        super().initialize(context)
        self.initialized = False
        if self.source_vocab is None:
            self.source_vocab = text_vocab.load_source_vocab(self.get_source_vocab_path(context))
        self.initialized = True

    def get_source_vocab_path(self, ctx: Context) -> Path:
        return source_vocab_path(Path(ctx.system_properties["model_dir"]), ctx.manifest)

    def _expand_contractions(self, text: str) -> str:
        return text_vocab.expand_contractions(text)

    def _remove_accented_characters(self, text: str) -> str:
        return text_vocab.remove_accented_characters(text)

    def _remove_html_tags(self, text: str) -> str:
        return text_vocab.remove_html_tags(text)

    def _remove_punctuation(self, text: str) -> str:
        return text_vocab.remove_punctuation(text)

    def _remove_puncutation(self, *args: Any, **kwargs: Any) -> str:
        return self._remove_punctuation(*args, **kwargs)

    def _tokenize(self, text: str) -> list[str]:
        return self.tokenizer(text)
