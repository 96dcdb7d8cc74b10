"""serve.zoo.layers (torchvision.ops.misc's blocks, stochastic depth, channel shuffle) against torchvision's."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from serve.zoo import layers
from serve.zoo.shufflenetv2 import channel_shuffle
from tests.torchvision_reference import needs_torchvision, reference_torchvision
from tests.unit.compat.torchvision._twins import fill_
from tests.unit.zoo.parity import assert_rel_close

pytestmark = needs_torchvision


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _same(ours, theirs, x):
    import torch

    fill_(theirs)
    theirs.eval()
    ours.load_state_dict({k: serve.from_numpy(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})
    ours.eval()
    with torch.no_grad(), serve.no_grad():
        assert_rel_close(ours(serve.from_numpy(x)), theirs(torch.from_numpy(x)), rtol=1e-5)


def test_conv_norm_activation_with_rectangular_kernel_and_dilation():
    ops = reference_torchvision().ops
    kw = {"kernel_size": (3, 5), "stride": 2, "dilation": (1, 2), "groups": 2}
    _same(layers.Conv2dNormActivation(4, 6, **kw), ops.Conv2dNormActivation(4, 6, **kw), _x(2, 4, 11, 13))


def test_squeeze_excitation_and_mlp():
    import torch

    ops = reference_torchvision().ops
    se = {"activation": serve.nn.SiLU, "scale_activation": serve.nn.Hardsigmoid}
    tse = {"activation": torch.nn.SiLU, "scale_activation": torch.nn.Hardsigmoid}
    _same(layers.SqueezeExcitation(8, 3, **se), ops.SqueezeExcitation(8, 3, **tse), _x(2, 8, 5, 5))
    ours = layers.MLP(6, [10, 4], norm_layer=serve.nn.LayerNorm, activation_layer=serve.nn.GELU)
    _same(ours, ops.MLP(6, [10, 4], norm_layer=torch.nn.LayerNorm, activation_layer=torch.nn.GELU), _x(3, 6))


def test_layer_norm_2d_normalizes_channels_like_convnexts():
    tv = reference_torchvision()
    _same(layers.LayerNorm2d(6, eps=1e-6), tv.models.convnext.LayerNorm2d(6, eps=1e-6), _x(2, 6, 3, 4))


def test_channel_shuffle_matches_torchvision():
    import torch

    tv = reference_torchvision()
    x = _x(2, 12, 3, 3)
    ref = tv.models.shufflenetv2.channel_shuffle(torch.from_numpy(x), 3).numpy()
    np.testing.assert_array_equal(channel_shuffle(serve.from_numpy(x), 3).numpy(), ref)


def test_stochastic_depth_is_identity_in_eval_and_drops_whole_rows_in_training():
    x = serve.from_numpy(np.abs(_x(400, 3, 2)) + 1.0)
    assert layers.stochastic_depth(x, 0.5, "row", training=False) is x
    serve.manual_seed(0)
    out = layers.stochastic_depth(x, 0.25, "row").numpy()
    ratio = out / x.numpy()
    per_row = ratio.reshape(400, -1)
    assert np.allclose(per_row, per_row[:, :1])  # a whole sample is kept or dropped
    kept = per_row[:, 0] > 0
    assert np.allclose(per_row[kept, 0], 1 / 0.75) and 0.6 < kept.mean() < 0.9
    batch = layers.stochastic_depth(x, 0.5, "batch").numpy() / x.numpy()
    assert np.allclose(batch, 0.0) or np.allclose(batch, 2.0)
    sd = layers.StochasticDepth(0.3, "row").eval()
    assert sd(x) is x


def test_stochastic_depth_rejects_bad_arguments():
    x = serve.ones(2, 2)
    with pytest.raises(ValueError, match="between 0 and 1"):
        layers.stochastic_depth(x, 1.5, "row")
    with pytest.raises(ValueError, match="'batch' or 'row'"):
        layers.stochastic_depth(x, 0.5, "col")
