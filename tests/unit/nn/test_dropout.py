"""Dropout: PyTorch's scaling, masks per element or per channel, train/eval, in-place, gradients, errors."""

import numpy as np
import pytest

import serve
from serve import nn
from tests.helpers import assert_close, needs_torch, torch

F = serve.nn.functional


def _kept_and_scaled(x, y, p):
    """Every output is 0 or x / (1 - p); returns the kept fraction."""
    xn, yn = x.numpy(), y.numpy()
    kept = yn != 0
    np.testing.assert_allclose(yn[kept], xn[kept] / (1 - p), rtol=1e-6)
    return kept.mean()


def test_dropout_scales_kept_elements_and_drops_about_p():
    x = serve.rand(200, 100) + 0.5
    y = F.dropout(x, 0.3)
    assert _kept_and_scaled(x, y, 0.3) == pytest.approx(0.7, abs=0.02)


def test_dropout_is_identity_when_not_training_or_p_zero():
    x = serve.randn(4, 5)
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x


def test_dropout_p_one_gives_zeros():
    x = serve.randn(4, 5)
    assert not F.dropout(x, 1.0).numpy().any()


def test_dropout_gradient_is_the_mask():
    x = serve.randn(50, 40, requires_grad=True)
    y = F.dropout(x, 0.4)
    y.sum().backward()
    mask = (y.detach().numpy() != 0) / 0.6
    np.testing.assert_allclose(x.grad.numpy(), mask, rtol=1e-6)


def test_dropout_inplace():
    x = serve.rand(30, 30) + 0.5
    ref = x.clone()
    y = F.dropout(x, 0.5, inplace=True)
    assert y is x
    _kept_and_scaled(ref, x, 0.5)


@pytest.mark.parametrize(("fn", "shape"), [(F.dropout1d, (8, 16, 5)), (F.dropout2d, (8, 16, 3, 3)),
                                           (F.dropout3d, (4, 16, 2, 2, 2))])  # fmt: skip
def test_feature_dropout_drops_whole_channels(fn, shape):
    x = serve.rand(*shape) + 0.5
    y = fn(x, 0.5)
    _kept_and_scaled(x, y, 0.5)
    per_channel = (y.numpy() != 0).reshape(shape[0], shape[1], -1)
    assert (per_channel.all(-1) | ~per_channel.any(-1)).all()  # a channel is kept or dropped whole
    assert 0.2 < per_channel.all(-1).mean() < 0.8


def test_unbatched_feature_dropout():
    x = serve.rand(16, 5) + 0.5
    y = F.dropout1d(x, 0.5).numpy() != 0
    assert (y.all(-1) | ~y.any(-1)).all()
    x = serve.rand(16, 2, 2, 2) + 0.5
    y = F.dropout3d(x, 0.5).numpy().reshape(16, -1) != 0
    assert (y.all(-1) | ~y.any(-1)).all()


def test_dropout2d_warns_like_torch_for_3d_and_other_ranks():
    with pytest.warns(UserWarning, match="assuming that channel-wise 1D dropout"):
        y = F.dropout2d(serve.rand(4, 8, 5) + 0.5, 0.5).numpy() != 0
    assert (y.all(-1) | ~y.any(-1)).all()
    with pytest.warns(UserWarning, match="Received a 2-D input to dropout2d"):
        F.dropout2d(serve.rand(4, 8), 0.5)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: F.dropout(serve.randn(3), 1.5), ValueError, "between 0 and 1, but got 1.5"),
        (lambda: F.dropout1d(serve.randn(3, 4, 5, 6)), RuntimeError, "Expected 2D or 3D input"),
        (lambda: nn.Dropout(-0.1), ValueError, "between 0 and 1"),
    ],
)
def test_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_modules_train_and_eval():
    for cls, shape in ((nn.Dropout, (20, 20)), (nn.Dropout1d, (4, 10, 5)), (nn.Dropout2d, (4, 10, 3, 3)),
                       (nn.Dropout3d, (2, 10, 2, 2, 2))):  # fmt: skip
        layer = cls(0.5)
        x = serve.rand(*shape) + 0.5
        assert (layer(x).numpy() == 0).any()
        layer.eval()
        assert layer(x) is x


@needs_torch
def test_module_repr_and_state_dict_match_torch():
    for name in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d"):
        ours, ref = getattr(nn, name)(0.2, inplace=True), getattr(torch.nn, name)(0.2, inplace=True)
        assert repr(ours) == repr(ref)
        assert list(ours.state_dict()) == list(ref.state_dict()) == []
    assert repr(nn.Dropout()) == repr(torch.nn.Dropout())


def test_half_precision_dropout():
    x = serve.ones(64, 64, dtype=serve.float16)
    y = F.dropout(x, 0.5)
    assert y.dtype == serve.float16
    assert_close(y.float(), (y.float() != 0).float() * 2.0)
