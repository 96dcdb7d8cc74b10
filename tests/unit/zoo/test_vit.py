"""A small VisionTransformer against a faithful copy of torchvision's: keys in order, logits, input gradient."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from serve.zoo import VisionTransformer
from tests.unit.zoo import twins_vision as tv
from tests.unit.zoo.parity import assert_rel_close, copy_weights, randomize_norms

torch = tv.torch
CONFIG = {"image_size": 32, "patch_size": 8, "num_layers": 2, "num_heads": 4, "hidden_dim": 64, "mlp_dim": 128,
          "num_classes": 10}  # fmt: skip


@pytest.mark.parametrize("representation_size", [None, 32])
def test_logits_and_input_gradient_match_torchvision(representation_size):
    torch.manual_seed(0)
    theirs = tv.VisionTransformer(**CONFIG, representation_size=representation_size)
    with torch.no_grad():
        theirs.class_token.normal_()
    randomize_norms(theirs)
    ours = VisionTransformer(**CONFIG, representation_size=representation_size)
    copy_weights(theirs, ours)
    ours.eval(), theirs.eval()
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    xs, xt = serve.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, ref = ours(xs), theirs(xt)
    assert_rel_close(out, ref)
    out.square().sum().backward()
    ref.square().sum().backward()
    assert_rel_close(xs.grad, xt.grad)


def test_key_names_are_torchvision_s():
    keys = list(VisionTransformer(**CONFIG).state_dict())
    assert keys[:3] == ["class_token", "conv_proj.weight", "conv_proj.bias"]
    assert "encoder.layers.encoder_layer_1.self_attention.in_proj_weight" in keys
    assert "encoder.layers.encoder_layer_0.mlp.3.bias" in keys and keys[-2:] == ["heads.head.weight", "heads.head.bias"]


def test_rejects_wrong_image_size():
    model = VisionTransformer(**CONFIG)
    with pytest.raises(ValueError, match="Wrong image size"):
        model(serve.zeros(1, 3, 24, 24))
    with pytest.raises(ValueError, match="indivisible"):
        VisionTransformer(30, 8, 1, 2, 16, 32)
