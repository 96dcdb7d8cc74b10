"""LSTMClassifier against its PyTorch original (Embedding -> nn.LSTM -> Linear): keys, logits, gradients."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from serve.zoo import LSTMClassifier
from tests.unit.zoo import twins_text as tt
from tests.unit.zoo.parity import assert_rel_close, copy_weights

torch = tt.torch


@pytest.mark.parametrize(("num_layers", "bidirectional"), [(1, False), (2, True)])
def test_logits_and_gradients_match_torch(num_layers, bidirectional):
    torch.manual_seed(0)
    theirs = tt.LSTMClassifier(50, 16, 24, 3, num_layers=num_layers, bidirectional=bidirectional)
    ours = LSTMClassifier(50, 16, 24, 3, num_layers=num_layers, bidirectional=bidirectional)
    copy_weights(theirs, ours)
    ids = np.random.default_rng(0).integers(0, 50, (4, 7))
    out, ref = ours(serve.from_numpy(ids)), theirs(torch.from_numpy(ids))
    assert_rel_close(out, ref, 1e-5)
    out.square().sum().backward()
    ref.square().sum().backward()
    assert_rel_close(ours.lstm.weight_hh_l0.grad, theirs.lstm.weight_hh_l0.grad, 1e-4)
    assert_rel_close(ours.embedding.weight.grad, theirs.embedding.weight.grad, 1e-4)
