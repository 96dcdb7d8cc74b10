"""`text_embedding`: one sentence embedding per request, as sentence-transformers computes it, batched.

Each request is one text (UTF-8 body, or `{"text": ...}` / `{"inputs": ...}`; see handlers/text_input.py). The
batch is tokenized with the archive's `tokenizer.json` (truncated at `handler.max_length` tokens, default 256
as sentence-transformers' all-MiniLM models; padded to the batch's longest), the model is called as
`model(input_ids, attention_mask)` and returns token embeddings (batch, tokens, dim), or a tuple/list whose
first element is that, or a dict with `last_hidden_state` / `token_embeddings`. They are mean-pooled over the
attention mask and L2-normalised (`handler.normalize`, default true). Each request gets a list of floats.

Model-config:
    handler:
      max_length: 256
      normalize: true
Warm-up (`example_inputs`): a batch of `max_length` tokens and its attention mask.
"""

from __future__ import annotations

from typing import Any

import serve
from handlers.base_handler import BaseHandler
from handlers.text_input import decode_text, encode_batch, example_ids, flag, load_tokenizer, positive_int
from serve.worker.context import Context
from serve.zoo.sentence import l2_normalize, mean_pooling

TOKEN_EMBEDDING_KEYS = ("last_hidden_state", "token_embeddings")


class TextEmbeddingHandler(BaseHandler):
    """Sentence embeddings: tokenize, encode, mean-pool over the attention mask, L2-normalise."""

    kserve_envelopes = True  # KServe v1 {"data": ...} / v2 BYTES inputs arrive as the text (batching/envelopes.py)

    def initialize(self, context: Context) -> None:
        super().initialize(context)
        self.max_length = positive_int(self.handler_config, "max_length", 256)
        self.normalize = flag(self.handler_config, "normalize", True)
        self.tokenizer = load_tokenizer(self.model_dir, self.max_length)

    def preprocess(self, data: list[Any]) -> tuple[serve.Tensor, serve.Tensor] | None:
        _, texts = self.decode_rows(data, decode_text)
        return encode_batch(self.tokenizer, texts) if texts else None

    def inference(self, data: Any, *args: Any, **kwargs: Any) -> serve.Tensor:
        input_ids, attention_mask = (t.to(self.device) for t in data)
        with serve.no_grad():
            tokens = self.model_output(token_embeddings(self.model(input_ids, attention_mask)))  # (B, T, D) fp32
            embeddings = mean_pooling(tokens, attention_mask)  # (B, D)
            return l2_normalize(embeddings) if self.normalize else embeddings

    def example_inputs(self, batch_size: int) -> tuple[serve.Tensor, ...]:
        """What `inference` passes the model for a batch of `max_length` tokens: the ids and the attention mask."""
        return tuple(t.to(self.device) for t in example_ids(self.tokenizer, batch_size, self.max_length))


def token_embeddings(output: Any) -> serve.Tensor:
    """The (batch, tokens, dim) tensor in what an encoder returns."""
    if isinstance(output, dict):
        key = next((k for k in TOKEN_EMBEDDING_KEYS if k in output), None)
        if key is None:
            wanted = " or ".join(TOKEN_EMBEDDING_KEYS)
            raise RuntimeError(f"the model returned a dict without {wanted}: it has {sorted(output)}")
        output = output[key]
    elif isinstance(output, (tuple, list)):
        output = output[0]
    if not isinstance(output, serve.Tensor) or output.dim() != 3:
        shape = tuple(output.shape) if isinstance(output, serve.Tensor) else type(output).__name__
        raise RuntimeError(f"text_embedding expects token embeddings (batch, tokens, dim) from the model, got {shape}")
    return output
