"""MLP and LeNet against their PyTorch originals: keys, outputs, input and parameter gradients."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import serve
from serve.zoo import MLP, LeNet
from tests.unit.zoo import twins_vision as tv
from tests.unit.zoo.parity import assert_rel_close, copy_weights

torch = tv.torch


def _compare(ours, theirs, shape, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    xs, xt = serve.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, ref = ours(xs), theirs(xt)
    assert_rel_close(out, ref, 1e-5)
    out.square().sum().backward()
    ref.square().sum().backward()
    assert_rel_close(xs.grad, xt.grad, 1e-5)
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert p.grad is not None, name
        assert_rel_close(p.grad, q.grad, 1e-5)


@pytest.mark.parametrize("hidden", [(128,), (32, 16)])
def test_mlp_matches_sequential(hidden):
    torch.manual_seed(0)
    widths = (64, *hidden)
    layers = []
    for a, b in itertools.pairwise(widths):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    theirs = torch.nn.Sequential(*layers, torch.nn.Linear(widths[-1], 10))
    ours = MLP(in_features=64, hidden=hidden, out_features=10)
    copy_weights(theirs, ours)
    _compare(ours, theirs, (5, 64))


def test_mlp_dropout_shifts_indices_like_torch():
    keys = list(MLP(8, (4, 4), 2, dropout=0.5).state_dict())
    assert keys == ["0.weight", "0.bias", "3.weight", "3.bias", "6.weight", "6.bias"]


def test_lenet_matches_tutorial_net():
    torch.manual_seed(0)
    theirs, ours = tv.LeNet(), LeNet()
    copy_weights(theirs, ours)
    _compare(ours, theirs, (3, 1, 32, 32))
