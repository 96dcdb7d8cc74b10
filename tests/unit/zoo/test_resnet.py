"""ResNet-18/34/50 against a faithful copy of torchvision's: keys in order, logits in eval and train mode."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from serve.zoo import resnet18, resnet34, resnet50
from tests.unit.zoo import twins_vision as tv
from tests.unit.zoo.parity import assert_rel_close, copy_weights, randomize_norms

torch = tv.torch


def _pair(ours_fn, block, layers):
    torch.manual_seed(0)
    theirs = tv.ResNet(block, layers, num_classes=10)
    randomize_norms(theirs)
    ours = ours_fn(num_classes=10)
    copy_weights(theirs, ours)
    return ours, theirs


def _images(n=2, size=64, seed=0):
    return np.random.default_rng(seed).standard_normal((n, 3, size, size)).astype(np.float32)


@pytest.mark.parametrize(
    ("ours_fn", "block", "layers"),
    [(resnet18, tv.BasicBlock, [2, 2, 2, 2]), (resnet50, tv.Bottleneck, [3, 4, 6, 3])],
    ids=["resnet18", "resnet50"],
)
def test_eval_logits_match_torchvision(ours_fn, block, layers):
    ours, theirs = _pair(ours_fn, block, layers)
    ours.eval(), theirs.eval()
    x = _images()
    with serve.no_grad(), torch.no_grad():
        assert_rel_close(ours(serve.from_numpy(x)), theirs(torch.from_numpy(x)))


def test_resnet18_train_mode_and_input_gradient():
    ours, theirs = _pair(resnet18, tv.BasicBlock, [2, 2, 2, 2])
    x = _images()
    xs, xt = serve.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, ref = ours(xs), theirs(xt)  # BatchNorm normalizes with batch statistics and updates running ones
    assert_rel_close(out, ref)
    assert_rel_close(ours.layer4[1].bn2.running_var, theirs.layer4[1].bn2.running_var)
    out.square().sum().backward()
    ref.square().sum().backward()
    assert_rel_close(xs.grad, xt.grad)
    assert_rel_close(ours.conv1.weight.grad, theirs.conv1.weight.grad)


def test_resnet34_keys_in_torchvision_order():
    keys = list(resnet34().state_dict())
    assert keys == list(tv.ResNet(tv.BasicBlock, [3, 4, 6, 3]).state_dict())
    assert "layer3.5.bn2.num_batches_tracked" in keys and "layer2.0.downsample.0.weight" in keys


def test_zero_init_residual_zeroes_last_bn_of_each_block():
    model = resnet18(zero_init_residual=True)
    assert float(model.layer1[0].bn2.weight.abs().sum()) == 0.0
    assert float(model.layer1[0].bn1.weight.sum()) == 64.0


def test_basic_block_rejects_groups():
    with pytest.raises(ValueError, match="groups=1"):
        serve.zoo.BasicBlock(64, 64, groups=2)
