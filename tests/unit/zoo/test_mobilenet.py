"""MobileNetV2 against a faithful copy of torchvision's: keys in order and eval logits."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from serve.zoo import MobileNetV2
from serve.zoo.mobilenet import InvertedResidual
from tests.unit.zoo import twins_vision as tv
from tests.unit.zoo.parity import assert_rel_close, copy_weights, randomize_norms

torch = tv.torch


@pytest.mark.parametrize("width_mult", [1.0, 0.5])
def test_eval_logits_match_torchvision(width_mult):
    torch.manual_seed(0)
    theirs = tv.MobileNetV2(num_classes=10, width_mult=width_mult)
    randomize_norms(theirs)
    ours = MobileNetV2(num_classes=10, width_mult=width_mult)
    copy_weights(theirs, ours)
    ours.eval(), theirs.eval()
    x = np.random.default_rng(0).standard_normal((2, 3, 64, 64)).astype(np.float32)
    with serve.no_grad(), torch.no_grad():
        assert_rel_close(ours(serve.from_numpy(x)), theirs(torch.from_numpy(x)))


def test_key_names_are_torchvision_s():
    keys = MobileNetV2().state_dict()
    for k in ("features.0.0.weight", "features.0.1.running_var", "features.1.conv.0.0.weight",
              "features.1.conv.1.weight", "features.2.conv.0.0.weight", "features.18.0.weight",
              "classifier.1.weight"):  # fmt: skip
        assert k in keys, k
    assert tuple(keys["features.1.conv.0.0.weight"].shape) == (32, 1, 3, 3)  # depthwise


def test_inverted_residual_rejects_stride_3():
    with pytest.raises(ValueError, match="stride should be 1 or 2"):
        InvertedResidual(8, 8, stride=3, expand_ratio=6)
