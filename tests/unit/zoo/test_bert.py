"""BertModel against HF transformers' BertModel (copied in plain torch): keys, hidden states, pooler, gradients."""

from __future__ import annotations

import json

import numpy as np
import pytest

import serve
from serve.zoo import BertConfig, BertModel
from serve.zoo.sentence import hf_bert_state_dict
from tests.unit.zoo import twins_text as tt
from tests.unit.zoo.parity import assert_rel_close, copy_weights, randomize_norms

torch = tt.torch
SMALL = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                   max_position_embeddings=16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip


def _pair():
    torch.manual_seed(0)
    theirs = tt.BertModel(SMALL)
    randomize_norms(theirs)
    ours = BertModel(SMALL)
    copy_weights(theirs, ours)
    return ours, theirs


def _batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 100, (3, 10))
    mask = np.ones((3, 10), dtype=np.int64)
    mask[1, 6:] = 0  # padded sentences
    mask[2, 3:] = 0
    ids[mask == 0] = 0
    types = np.zeros_like(ids)
    types[:, 5:] = 1
    return ids, mask, types


def test_hidden_states_and_pooler_match_transformers():
    ours, theirs = _pair()
    ids, mask, types = _batch()
    out = ours(serve.from_numpy(ids), serve.from_numpy(mask), serve.from_numpy(types))
    ref = theirs(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(types))
    assert_rel_close(out.last_hidden_state, ref[0], 1e-5)
    assert_rel_close(out.pooler_output, ref[1], 1e-5)
    out.pooler_output.square().sum().backward()
    ref[1].square().sum().backward()
    layer = "encoder.layer.0.attention.self.query.weight"
    assert_rel_close(dict(ours.named_parameters())[layer].grad, dict(theirs.named_parameters())[layer].grad, 1e-4)
    assert_rel_close(ours.embeddings.word_embeddings.weight.grad, theirs.embeddings.word_embeddings.weight.grad, 1e-4)


def test_defaults_and_an_all_ones_mask_match_transformers():
    ours, theirs = _pair()
    ids = _batch()[0]
    ones = np.ones_like(ids)
    with serve.no_grad(), torch.no_grad():
        ref = theirs(torch.from_numpy(ids), torch.from_numpy(ones))[0]
        assert_rel_close(ours(serve.from_numpy(ids))[0], ref, 1e-5)
        assert_rel_close(ours(serve.from_numpy(ids), serve.from_numpy(ones))[0], ref, 1e-5)


def test_config_from_json_ignores_unknown_fields(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 2, "architectures": ["BertModel"]}))
    config = BertConfig.from_json_file(path)
    assert (config.hidden_size, config.num_attention_heads, config.vocab_size) == (64, 2, 30522)


@pytest.mark.parametrize(
    ("fields", "match"),
    [({"hidden_size": 30, "num_attention_heads": 4}, "not a multiple"), ({"hidden_act": "mish"}, "hidden_act"),
     ({"position_embedding_type": "relative_key"}, "position_embedding_type")],
)  # fmt: skip
def test_config_rejects_what_the_model_cannot_do(fields, match):
    with pytest.raises(ValueError, match=match):
        BertConfig.from_dict(fields)


def test_too_long_input_says_truncate():
    with pytest.raises(ValueError, match="max_position_embeddings"):
        BertModel(SMALL)(serve.zeros(1, 17, dtype=serve.int64))


def test_hf_checkpoint_keys_are_mapped_explicitly():
    w = serve.zeros(1)
    state = {"bert.embeddings.position_ids": w, "bert.pooler.dense.bias": w, "classifier.weight": w}
    assert list(hf_bert_state_dict(state)) == ["pooler.dense.bias"]
    assert list(hf_bert_state_dict({"embeddings.position_ids": w, "pooler.dense.bias": w})) == ["pooler.dense.bias"]
