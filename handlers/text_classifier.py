"""`text_classifier`: class probabilities for each request's text, `{label: prob}` over every class, batched.

Our version of TorchServe's text_classifier, which needs torchtext (its `source_vocab.pt`, n-grams and
hand-written text cleaning). Here the archive carries a Hugging Face `tokenizer.json` (its normalizer does the
cleaning), and labels come from `index_to_name.json` (`{"0": "negative", ...}`; a list value's last element;
the class index as a string when the file is absent or lacks a class), as TorchServe's classifiers map them.

The model is called on the whole batch as
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
Warm-up (`example_inputs`): a batch of `max_length` tokens, with the mask when the model takes it.
"""

from __future__ import annotations

import inspect
from typing import Any

import serve
from handlers.base_handler import BaseHandler, map_class_to_label
from handlers.text_input import decode_text, encode_batch, example_ids, load_tokenizer, positive_int
from serve.worker.context import Context


class TextClassifier(BaseHandler):
    """Tokenize the batch, run the classifier, softmax, `{label: prob}` per request."""

    def initialize(self, context: Context) -> None:
        super().initialize(context)
        self.max_length = positive_int(self.handler_config, "max_length", 512)
        self.tokenizer = load_tokenizer(self.model_dir, self.max_length)
        self.pass_attention_mask = takes_attention_mask(self.model)

    def preprocess(self, data: list[Any]) -> tuple[serve.Tensor, serve.Tensor] | None:
        _, texts = self.decode_rows(data, decode_text)
        return encode_batch(self.tokenizer, texts) if texts else None

    def inference(self, data: Any, *args: Any, **kwargs: Any) -> serve.Tensor:
        input_ids, attention_mask = (t.to(self.device) for t in data)
        with serve.no_grad():
            inputs = (input_ids, attention_mask) if self.pass_attention_mask else (input_ids,)
            logits = _logits(self.model(*inputs))
            return logits.float().softmax(dim=-1)  # (B, classes)

    def example_inputs(self, batch_size: int) -> tuple[serve.Tensor, ...]:
        """What `inference` passes the model for `max_length` tokens: the ids, and the mask when it takes one."""
        ids, mask = example_ids(self.tokenizer, batch_size, self.max_length)
        input_ids, attention_mask = ids.to(self.device), mask.to(self.device)
        return (input_ids, attention_mask) if self.pass_attention_mask else (input_ids,)

    def postprocess(self, data: Any) -> list[dict[str, float]]:
        return map_class_to_label(data.tolist(), self.mapping)


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
