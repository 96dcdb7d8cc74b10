"""`text_classifier`: class probabilities for each request's text, `{label: prob}` over every class, batched.

Two kinds of archive, told apart at initialize (or chosen with model-config `handler: {text_input: ...}`):
- "source_vocab", TorchServe's: the archive has `source_vocab.pt` (or manifest `model.sourceVocab`) and no
  tokenizer.json. Each text is cleaned, tokenized and turned into ids with its n-grams (`handler: {ngrams: 2}`,
  TorchServe's default) as TorchServe's handler does (handlers/text_vocab.py), and the model is called as
  TorchServe calls it, `model(text, offsets)`: the batch's ids concatenated (int64) and each text's start
  offset, EmbeddingBag's input (TorchServe's handler sends one text with offsets [0]; a batch gives the same
  per-text answers for an EmbeddingBag model). TorchServe archives keep working unchanged.
- "tokenizer", ours (the default when tokenizer.json is present): a Hugging Face `tokenizer.json` does the
  cleaning and tokenization, and the model is called on the whole batch as described below.
Labels come from `index_to_name.json` (`{"0": "negative", ...}`; a list value's last element; the class index
as a string when the file is absent or lacks a class), as TorchServe's classifiers map them.

In tokenizer mode the model is called on the whole batch as
- `model(input_ids, attention_mask)` when its `forward` has a parameter named `attention_mask` or takes two or
  more positional arguments (BERT-style classifiers), or
- `model(input_ids)` when it takes one (an embedding + LSTM classifier, say). Such a model sees the padding,
  so a text's result can depend on the longest text in its batch; a recurrent model that reads its last state
  wants `"padding": {"direction": "Left", ...}` in tokenizer.json,
and returns logits (batch, classes): a tensor, a tuple/list whose first element is one, or something with
`.logits` / `["logits"]`. Softmax over the classes gives each request its `{label: prob}`.

Where we differ from TorchServe: every request of the batch is classified (TorchServe's handler reads only
`data[0]` and answers the others with nothing); the result per request is the dict itself, not a one-element
list. Model-config: `handler: {max_length: 512}` (tokens, special tokens included).
Explanations (`/explanations/{model}`): TorchServe's `{"importances", "words"}` per request in source_vocab mode,
`{"words", "importances", "delta"}` (one importance per token) in tokenizer mode, by layer integrated gradients
over the embedding layer (handlers/insights.py); model-config `handler: {ig_steps: 50, ig_batch_size: 16}`.
Warm-up (`example_inputs`): a batch of `max_length` tokens, with the mask when the model takes it (none in
source_vocab mode, where the length follows the texts).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import serve
from handlers.base_handler import BaseHandler, map_class_to_label
from handlers.insights import explain_rows, ig_settings, text_insights
from handlers.text_input import decode_text, encode_batch, example_ids, load_tokenizer, positive_int
from handlers.text_vocab import load_source_vocab, offsets_batch, token_ids
from serve.worker.context import Context

TEXT_INPUTS = ("source_vocab", "tokenizer")


class TextClassifier(BaseHandler):
    """Tokenize the batch, run the classifier, softmax, `{label: prob}` per request."""

    text_input: str | None = None  # "source_vocab" or "tokenizer"; None: detect (see the module docstring)
    kserve_envelopes = True  # KServe v1 {"data": ...} / v2 BYTES inputs arrive as the text (batching/envelopes.py)
    ngrams = 2
    source_vocab: dict[str, int] | None = None  # source_vocab mode: {token: index}
    tokenizer: Any = None  # tokenizer mode: the Hugging Face tokenizer
    ig_steps = 50  # integrated-gradients steps of an explanation (Captum's default, TorchServe's text handler)

    def initialize(self, context: Context) -> None:
        super().initialize(context)
        self.text_input = text_input_kind(self.handler_config.get("text_input", self.text_input), self.model_dir,
                                          context.manifest)  # fmt: skip
        ig_settings(self, self.ig_steps)  # a bad handler.ig_steps / ig_batch_size fails the load, not a request
        if self.text_input == "source_vocab":
            self.ngrams = positive_int(self.handler_config, "ngrams", self.ngrams)
            self.source_vocab = load_source_vocab(source_vocab_path(self.model_dir, context.manifest))
            return
        self.max_length = positive_int(self.handler_config, "max_length", 512)
        if not (self.model_dir / "tokenizer.json").is_file():
            raise FileNotFoundError(
                f"text_classifier needs tokenizer.json (ours) or source_vocab.pt (TorchServe's {{token: index}} "
                f"vocabulary) in the model directory {self.model_dir}: add one with model-archiver --extra-files"
            )
        self.tokenizer = load_tokenizer(self.model_dir, self.max_length)
        self.pass_attention_mask = takes_attention_mask(self.model)

    def preprocess(self, data: list[Any]) -> tuple[serve.Tensor, serve.Tensor] | None:
        _, texts = self.decode_rows(data, decode_text)
        if not texts:
            return None
        if self.source_vocab is not None:  # source_vocab mode
            return offsets_batch([token_ids(self.source_vocab, t, self.ngrams) for t in texts])  # (text, offsets)
        return encode_batch(self.tokenizer, texts)

    def inference(self, data: Any, *args: Any, **kwargs: Any) -> serve.Tensor:
        if self.text_input == "source_vocab":
            # a TorchServe subclass's preprocess returns one text's ids alone: TorchServe's offsets [0]
            text, offsets = (data, serve.tensor([0], dtype=serve.int64)) if isinstance(data, serve.Tensor) else data
            with serve.no_grad():
                logits = _logits(self.model(text.to(self.device), offsets.to(self.device)))
                return logits.float().softmax(dim=-1)  # (B, classes)
        input_ids, attention_mask = (t.to(self.device) for t in data)
        with serve.no_grad():
            inputs = (input_ids, attention_mask) if self.pass_attention_mask else (input_ids,)
            logits = _logits(self.model(*inputs))
            return logits.float().softmax(dim=-1)  # (B, classes)

    def example_inputs(self, batch_size: int) -> tuple[serve.Tensor, ...] | None:
        """What `inference` passes the model for `max_length` tokens: the ids, and the mask when it takes one."""
        if self.text_input == "source_vocab":
            return None  # the concatenated ids' length follows the texts
        ids, mask = example_ids(self.tokenizer, batch_size, self.max_length)
        input_ids, attention_mask = ids.to(self.device), mask.to(self.device)
        return (input_ids, attention_mask) if self.pass_attention_mask else (input_ids,)

    def postprocess(self, data: Any) -> list[dict[str, float]]:
        return map_class_to_label(data.tolist(), self.mapping)

    # ---- explanations (handlers/insights.py) ---------------------------------------------------------------

    def explain_handle(self, data_preprocess: Any, raw_data: list[Any]) -> Any:
        """Word importances for each request's `target` class (0 by default), TorchServe's JSON."""
        return explain_rows(self, data_preprocess, raw_data)

    def get_insights(self, text_preprocess: Any, rows: Any, target: Any = 0) -> list[dict[str, Any]]:
        """TorchServe's TextClassifier.get_insights: layer integrated gradients over the embedding layer."""
        return text_insights(self, text_preprocess, rows, target)


def source_vocab_path(model_dir: Path, manifest: dict[str, Any] | None) -> Path:
    """The manifest's `model.sourceVocab` (TorchServe's older archives), else source_vocab.pt in the model dir."""
    named = ((manifest or {}).get("model") or {}).get("sourceVocab")
    return model_dir / named if named else model_dir / "source_vocab.pt"


def text_input_kind(setting: Any, model_dir: Path, manifest: dict[str, Any] | None) -> str:
    """ "source_vocab" or "tokenizer": the setting when given, else what the archive holds."""
    if setting is not None:
        if setting not in TEXT_INPUTS:
            raise ValueError(f"model-config handler.text_input must be one of {list(TEXT_INPUTS)}, got {setting!r}")
        return str(setting)
    if (model_dir / "tokenizer.json").is_file():
        return "tokenizer"
    return "source_vocab" if source_vocab_path(model_dir, manifest).is_file() else "tokenizer"


def takes_attention_mask(model: Any) -> bool:
    """Whether `model.forward` wants the attention mask after the token ids (see the module docstring)."""
    params = list(inspect.signature(model.forward).parameters.values())
    if any(p.name == "attention_mask" for p in params):
        return True
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return True
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in positional for p in params) >= 2


def _logits(output: Any) -> serve.Tensor:
    if isinstance(output, dict):
        output = output.get("logits")
    elif isinstance(output, (tuple, list)):
        output = output[0]
    elif not isinstance(output, serve.Tensor):
        output = getattr(output, "logits", None)
    if not isinstance(output, serve.Tensor) or output.dim() != 2:
        shape = tuple(output.shape) if isinstance(output, serve.Tensor) else type(output).__name__
        raise RuntimeError(f"text_classifier expects logits (batch, classes) from the model, got {shape}")
    return output
