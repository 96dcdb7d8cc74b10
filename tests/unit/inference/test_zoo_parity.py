"""Optimized zoo models against their PyTorch twins: the plan stays within 1e-4 of PyTorch (skipped without torch)."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from serve.inference import optimize
from serve.zoo import BertModel, MobileNetV2, resnet18, resnet50
from tests.unit.zoo import twins_text as tt
from tests.unit.zoo import twins_vision as tv
from tests.unit.zoo.parity import assert_rel_close, copy_weights, randomize_norms
from tests.unit.zoo.test_bert import SMALL, _batch

torch = tv.torch
pytestmark = pytest.mark.torch


@pytest.mark.parametrize(("ours", "theirs"), [(resnet18, tv.resnet18), (resnet50, tv.resnet50),
                                               (MobileNetV2, tv.MobileNetV2)])  # fmt: skip
def test_optimized_vision_models_match_pytorch(ours, theirs):
    torch.manual_seed(0)
    ref = theirs(num_classes=10)
    randomize_norms(ref)
    model = ours(num_classes=10)
    copy_weights(ref, model)
    model.eval(), ref.eval()
    x = np.random.default_rng(1).standard_normal((2, 3, 64, 64)).astype(np.float32)
    with serve.no_grad(), torch.no_grad():
        opt = optimize(model, (serve.from_numpy(x),))
        assert opt.optimized, opt.reason
        assert_rel_close(opt(serve.from_numpy(x)), ref(torch.from_numpy(x)), 1e-4)


def test_optimized_bert_matches_transformers():
    torch.manual_seed(0)
    ref = tt.BertModel(SMALL)
    randomize_norms(ref)
    model = BertModel(SMALL)
    copy_weights(ref, model)
    ids, mask, types = (serve.from_numpy(a) for a in _batch())
    with serve.no_grad(), torch.no_grad():
        opt = optimize(model.eval(), (ids, mask, types))
        assert opt.optimized, opt.reason
        out = opt(ids, mask, types)
        want = ref.eval()(*(torch.from_numpy(a) for a in _batch()))
    assert_rel_close(out.last_hidden_state, want[0], 1e-4)
    assert_rel_close(out.pooler_output, want[1], 1e-4)


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_optimized_transformer_encoder_matches_pytorch(activation):
    torch.manual_seed(0)
    ref = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation=activation,
                                                                       batch_first=True), 2).eval()  # fmt: skip
    layer = serve.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation=activation, batch_first=True)
    model = serve.nn.TransformerEncoder(layer, 2)
    copy_weights(ref, model)
    x = np.random.default_rng(2).standard_normal((3, 7, 32)).astype(np.float32)
    with serve.no_grad(), torch.no_grad():
        opt = optimize(model.eval(), (serve.from_numpy(x),))
        assert opt.optimized, opt.reason
        assert opt.describe()["passes"]["act_fused"] == 2  # the functional activation, fused into each linear1
        assert_rel_close(opt(serve.from_numpy(x)), ref(torch.from_numpy(x)), 1e-4)
    assert opt.original.layers[0].activation is not None  # the original layer keeps its own activation
