"""A BERT encoder as Hugging Face `transformers.BertModel`, with its module names and its `config.json`.

Keys: `embeddings.word_embeddings`, `embeddings.position_embeddings`, `embeddings.token_type_embeddings`,
`embeddings.LayerNorm`, `encoder.layer.N.attention.self.query|key|value`, `encoder.layer.N.attention.output.dense`
and `.LayerNorm`, `encoder.layer.N.intermediate.dense`, `encoder.layer.N.output.dense` and `.LayerNorm`,
`pooler.dense`. Position ids are made on the fly rather than kept in a buffer (recent `transformers` keep it
non-persistent too), so `embeddings.position_ids`, which older checkpoints carry, is not a key here.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, NamedTuple

import serve
from serve import nn
from serve.nn import functional as F

_ACTIVATIONS = {
    "gelu": lambda: nn.GELU(),
    "gelu_new": lambda: nn.GELU(approximate="tanh"),
    "gelu_pytorch_tanh": lambda: nn.GELU(approximate="tanh"),
    "relu": lambda: nn.ReLU(),
    "silu": lambda: nn.SiLU(),
    "swish": lambda: nn.SiLU(),
    "tanh": lambda: nn.Tanh(),
}


@dataclasses.dataclass
class BertConfig:
    """The fields of a Hugging Face BERT `config.json` that shape the model (others are ignored)."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    position_embedding_type: str = "absolute"

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"The hidden size ({self.hidden_size}) is not a multiple of the number of attention heads "
                f"({self.num_attention_heads})"
            )
        if self.hidden_act not in _ACTIVATIONS:
            raise ValueError(f"hidden_act {self.hidden_act!r} is not supported; use one of {sorted(_ACTIVATIONS)}")
        if self.position_embedding_type != "absolute":
            raise ValueError(
                f"position_embedding_type {self.position_embedding_type!r} is not supported, only 'absolute'"
            )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BertConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def from_json_file(cls, path: str | Path) -> BertConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))


class BaseModelOutputWithPooling(NamedTuple):
    """BertModel's output, indexable like the tuple `transformers` returns with `return_dict=False`."""

    last_hidden_state: serve.Tensor  # (B, T, hidden)
    pooler_output: serve.Tensor | None  # (B, hidden)


class BertEmbeddings(nn.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: serve.Tensor, token_type_ids: serve.Tensor | None = None) -> serve.Tensor:
        seq_length = input_ids.shape[1]
        if seq_length > self.position_embeddings.num_embeddings:
            raise ValueError(
                f"sequence length {seq_length} exceeds max_position_embeddings "
                f"{self.position_embeddings.num_embeddings}: truncate the input"
            )
        position_ids = serve.arange(seq_length, device=input_ids.device).unsqueeze(0)  # (1, T)
        if token_type_ids is None:
            token_type_ids = serve.zeros(seq_length, dtype=serve.int64, device=input_ids.device).unsqueeze(0)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(position_ids)  # (B, T, hidden)
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    """Scaled dot-product attention over `num_attention_heads` heads, with separate query/key/value Linears."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = config.hidden_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def _heads(self, x: serve.Tensor) -> serve.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.num_attention_heads, self.attention_head_size).permute(0, 2, 1, 3)  # (B, H, T, d)

    def forward(self, hidden_states: serve.Tensor, attention_mask: serve.Tensor | None = None) -> serve.Tensor:
        b, t, _ = hidden_states.shape
        q = self._heads(self.query(hidden_states))
        k = self._heads(self.key(hidden_states))
        v = self._heads(self.value(hidden_states))
        # softmax(q k^T / sqrt(d) + mask) v, as Hugging Face's SDPA attention: serving runs it as one fused kernel
        p = self.dropout.p if self.training else 0.0
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, dropout_p=p)  # (B, H, T, d)
        return context.permute(0, 2, 1, 3).reshape(b, t, self.all_head_size)  # (B, T, hidden)


class BertSelfOutput(nn.Module):
    """Output projection of attention, dropout, residual and LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: serve.Tensor, input_tensor: serve.Tensor) -> serve.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, hidden_states: serve.Tensor, attention_mask: serve.Tensor | None = None) -> serve.Tensor:
        return self.output(self.self(hidden_states, attention_mask), hidden_states)


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = _ACTIVATIONS[config.hidden_act]()

    def forward(self, hidden_states: serve.Tensor) -> serve.Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertOutput(nn.Module):
    """Feed-forward down-projection, dropout, residual and LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: serve.Tensor, input_tensor: serve.Tensor) -> serve.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, hidden_states: serve.Tensor, attention_mask: serve.Tensor | None = None) -> serve.Tensor:
        attention_output = self.attention(hidden_states, attention_mask)
        return self.output(self.intermediate(attention_output), attention_output)


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states: serve.Tensor, attention_mask: serve.Tensor | None = None) -> serve.Tensor:
        for layer in self.layer:
            hidden_states = layer(hidden_states, attention_mask)
        return hidden_states


class BertPooler(nn.Module):
    """tanh(Linear) of the first ([CLS]) token."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: serve.Tensor) -> serve.Tensor:
        return self.activation(self.dense(hidden_states[:, 0]))


class BertModel(nn.Module):
    """`transformers.BertModel(config, add_pooling_layer=True)`: embeddings, encoder, optional pooler."""

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None

    def forward(
        self,
        input_ids: serve.Tensor,
        attention_mask: serve.Tensor | None = None,
        token_type_ids: serve.Tensor | None = None,
    ) -> BaseModelOutputWithPooling:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids should be (batch_size, sequence_length), got shape {tuple(input_ids.shape)}")
        hidden = self.embeddings(input_ids, token_type_ids)
        hidden = self.encoder(hidden, _extended_mask(attention_mask, hidden.dtype))
        pooled = self.pooler(hidden) if self.pooler is not None else None
        return BaseModelOutputWithPooling(hidden, pooled)


def _extended_mask(attention_mask: serve.Tensor | None, dtype: serve.dtype) -> serve.Tensor | None:
    """(B, T) of 1 (attend) / 0 (padding) -> an additive (B, 1, 1, T) mask: 0 or the dtype's lowest value."""
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask should be (batch_size, sequence_length), got {tuple(attention_mask.shape)}")
    if bool(attention_mask.all()):  # nothing is padding: skip adding zeros to every score, as transformers' SDPA path
        return None
    keep = attention_mask[:, None, None, :].to(dtype)  # (B, 1, 1, T)
    return (1.0 - keep) * serve.finfo(dtype).min
