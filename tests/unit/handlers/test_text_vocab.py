"""`text_classifier` on TorchServe-style archives (source_vocab.pt, `model(text, offsets)`) against PyTorch's
EmbeddingBag + Linear on the same ids, and TorchServe's text cleaning / n-grams spelled out by hand from its docs
(torchtext's basic_english and ngrams_iterator)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from handlers import text_vocab
from handlers.text_classifier import TextClassifier, text_input_kind
from serve.worker import Context, load_handler
from tests.helpers import needs_torch, torch

VOCAB = {"<unk>": 0, "the": 1, "movie": 2, "is": 3, "not": 4, "good": 5, "the movie": 6, "not good": 7, "bad": 8}
TEXTS = ["The <b>movie</b> isn't good!", "bad", "Café: the movie, NOT good."]

MODEL = """
import torch
from torch import nn


class TextSentiment(nn.Module):
    def __init__(self, vocab_size=9, embed_dim=4, num_class=3):
        super().__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, sparse=True)
        self.fc = nn.Linear(embed_dim, num_class)

    def forward(self, text, offsets):
        return self.fc(self.embedding(text, offsets))
"""


def test_cleaning_tokens_and_ngrams_follow_torchserve():
    assert text_vocab.clean_text(TEXTS[0]) == ["the", "movie", "is", "not", "good"]
    assert text_vocab.clean_text(TEXTS[2]) == ["cafe", "the", "movie", "not", "good"]
    assert text_vocab.basic_english('A "quote", (x)!') == ["a", "quote", ",", "(", "x", ")", "!"]
    assert list(text_vocab.ngrams_iterator(["a", "b", "c"], 3)) == ["a", "b", "c", "a b", "b c", "a b c"]
    assert text_vocab.expand_contractions("I'm sure they're fine, Won't") == "I am sure they are fine, Will not"
    assert text_vocab.token_ids(VOCAB, TEXTS[0], 2) == [1, 2, 3, 4, 5, 6, 0, 0, 7]
    text, offsets = text_vocab.offsets_batch([[1, 2], [8], [3, 4, 5]])
    assert text.tolist() == [1, 2, 8, 3, 4, 5] and offsets.tolist() == [0, 2, 3]


def archive(tmp_path: Path, state_dict, files: dict[str, str] | None = None) -> Path:
    (tmp_path / "model.py").write_text(MODEL)
    torch.save(state_dict, tmp_path / "model.pt")
    torch.save(VOCAB, tmp_path / "source_vocab.pt")
    (tmp_path / "index_to_name.json").write_text(json.dumps({"0": "neg", "1": "neutral", "2": "pos"}))
    for name, text in (files or {}).items():
        (tmp_path / name).write_text(text)
    return tmp_path


def torch_model():
    torch.manual_seed(0)
    bag, fc = torch.nn.EmbeddingBag(9, 4), torch.nn.Linear(4, 3)
    state = {"embedding.weight": bag.weight, "fc.weight": fc.weight, "fc.bias": fc.bias}
    return state, lambda text, offsets: fc(bag(text, offsets))


@needs_torch
@pytest.mark.parametrize("handler_name", ["text_classifier", "ts"])
def test_torchserve_archive_is_called_as_model_text_offsets_and_answers_as_torch(tmp_path, handler_name):
    state, forward = torch_model()
    root = archive(tmp_path, state)
    manifest = {"model": {"modelName": "news", "modelFile": "model.py", "serializedFile": "model.pt",
                          "handler": "text_classifier"}}  # fmt: skip
    context = Context("news", str(root), manifest, 4, None, "0.1", model_yaml_config={"torchCompat": True})
    if handler_name == "ts":
        from serve.compat.ts.torch_handler.text_classifier import TextClassifier as TsTextClassifier

        handler = TsTextClassifier()
        handler.initialize(context)
    else:
        handler = load_handler(context)
    assert isinstance(handler, TextClassifier) and handler.text_input == "source_vocab" and handler.ngrams == 2
    context.begin_batch({i: f"r{i}" for i in range(3)}, [{}, {}, {}])
    out = handler.handle([{"body": t.encode()} for t in TEXTS], context)
    for text, got in zip(TEXTS, out):
        ids = torch.tensor(text_vocab.token_ids(VOCAB, text, 2))
        with torch.no_grad():  # TorchServe's call: one text, offsets [0], softmax over the classes
            ref = torch.softmax(forward(ids, torch.tensor([0])), dim=1)[0].tolist()
        assert list(got) == ["neg", "neutral", "pos"]
        np.testing.assert_allclose(list(got.values()), ref, atol=1e-6, rtol=0)


def test_the_kind_of_archive_is_detected_or_configured(tmp_path):
    assert text_input_kind(None, tmp_path, None) == "tokenizer"  # neither file: the tokenizer's error says what
    (tmp_path / "source_vocab.pt").write_bytes(b"")
    assert text_input_kind(None, tmp_path, None) == "source_vocab"
    (tmp_path / "tokenizer.json").write_text("{}")
    assert text_input_kind(None, tmp_path, None) == "tokenizer"
    assert text_input_kind("source_vocab", tmp_path, None) == "source_vocab"
    (tmp_path / "vocab.pt").write_bytes(b"")
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "source_vocab.pt").unlink()
    assert text_input_kind(None, tmp_path, {"model": {"sourceVocab": "vocab.pt"}}) == "source_vocab"
    with pytest.raises(ValueError, match=r"handler\.text_input must be one of"):
        text_input_kind("bpe", tmp_path, None)


@needs_torch
def test_a_pickled_vocab_object_is_refused_with_what_to_save_instead(tmp_path):
    import collections

    torch.save(collections.Counter({"a": 1}), tmp_path / "source_vocab.pt")
    with pytest.raises(ValueError, match=r"get_stoi\(\)"):
        text_vocab.load_source_vocab(tmp_path / "source_vocab.pt")
    torch.save({"a": "b"}, tmp_path / "source_vocab.pt")
    with pytest.raises(ValueError, match="dict of str to int"):
        text_vocab.load_source_vocab(tmp_path / "source_vocab.pt")


@needs_torch
def test_an_archive_with_neither_vocabulary_nor_tokenizer_says_what_to_add(tmp_path):
    state, _ = torch_model()
    root = archive(tmp_path, state)
    (root / "source_vocab.pt").unlink()
    manifest = {"model": {"modelName": "news", "modelFile": "model.py", "serializedFile": "model.pt"}}
    context = Context("news", str(root), manifest, 1, None, "0.1", model_yaml_config={"torchCompat": True})
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.json \(ours\) or source_vocab\.pt"):
        TextClassifier().initialize(context)
