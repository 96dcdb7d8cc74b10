"""serve.nn.init: gains and fans equal PyTorch's; random initialisers checked by bounds and distribution (serve's
random streams are its own), deterministic ones by value."""

import math

import numpy as np
import pytest

import serve
from serve.backend import ops_cpu
from serve.nn import Parameter, init
from tests.helpers import assert_close, needs_torch, torch


def _param(*shape):
    return Parameter(serve.empty(*shape))


@needs_torch
def test_calculate_gain_matches_torch():
    cases = [("linear", None), ("conv2d", None), ("sigmoid", None), ("tanh", None), ("relu", None),
             ("leaky_relu", None), ("leaky_relu", 0.2), ("leaky_relu", 1), ("selu", None)]  # fmt: skip
    for name, param in cases:
        assert init.calculate_gain(name, param) == pytest.approx(torch.nn.init.calculate_gain(name, param))
    with pytest.raises(ValueError, match="Unsupported nonlinearity"):
        init.calculate_gain("foo")
    with pytest.raises(ValueError, match="not a valid number"):
        init.calculate_gain("leaky_relu", True)


@needs_torch
@pytest.mark.parametrize("shape", [(3, 4), (8, 3, 5, 5), (2, 6, 3)])
def test_fans_match_torch(shape):
    assert init._calculate_fan_in_and_fan_out(serve.empty(*shape)) == torch.nn.init._calculate_fan_in_and_fan_out(
        torch.empty(*shape)
    )


def test_fans_need_two_dims():
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(serve.empty(4))


def test_uniform_and_normal():
    w = init.uniform_(_param(200, 100), -0.5, 2.0)
    data = w.detach().numpy()
    assert data.min() >= -0.5 and data.max() < 2.0 and data.mean() == pytest.approx(0.75, abs=0.02)
    assert w.grad_fn is None and w.requires_grad
    data = init.normal_(_param(200, 100), 3.0, 0.5).detach().numpy()
    assert data.mean() == pytest.approx(3.0, abs=0.01) and data.std() == pytest.approx(0.5, rel=0.02)


def test_generator_makes_draws_reproducible():
    a = init.kaiming_uniform_(serve.empty(5, 4), generator=serve.Generator().manual_seed(7))
    b = init.kaiming_uniform_(serve.empty(5, 4), generator=serve.Generator().manual_seed(7))
    c = init.kaiming_uniform_(serve.empty(5, 4), generator=serve.Generator().manual_seed(8))
    assert a.tolist() == b.tolist() != c.tolist()


def test_constant_ones_zeros():
    assert init.constant_(_param(2, 3), 0.25).tolist() == [[0.25] * 3] * 2
    assert init.ones_(_param(3)).tolist() == [1.0] * 3
    assert init.zeros_(_param(3)).tolist() == [0.0] * 3


@needs_torch
def test_eye_and_dirac_match_torch():
    assert_close(init.eye_(_param(3, 5)).detach(), torch.nn.init.eye_(torch.empty(3, 5)))
    for shape, groups in (((4, 2, 3), 1), ((6, 3, 3, 3), 2), ((2, 2, 1, 3, 3), 1)):
        assert_close(init.dirac_(serve.empty(*shape), groups), torch.nn.init.dirac_(torch.empty(*shape), groups))
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions"):
        init.eye_(serve.empty(2, 2, 2))
    with pytest.raises(ValueError, match="Only tensors with 3, 4, or 5 dimensions"):
        init.dirac_(serve.empty(2, 2))


@pytest.mark.parametrize("gain", [1.0, 2.0])
def test_xavier(gain):
    fan_in, fan_out = 300, 200
    std = gain * math.sqrt(2.0 / (fan_in + fan_out))
    data = init.xavier_uniform_(serve.empty(fan_out, fan_in), gain).numpy()
    assert np.abs(data).max() <= std * math.sqrt(3) and data.std() == pytest.approx(std, rel=0.02)
    data = init.xavier_normal_(serve.empty(fan_out, fan_in), gain).numpy()
    assert data.std() == pytest.approx(std, rel=0.02) and abs(data.mean()) < 0.02 * std * 10


@pytest.mark.parametrize(
    ("a", "mode", "nonlinearity"),
    [
        (0, "fan_in", "leaky_relu"),
        (math.sqrt(5), "fan_in", "leaky_relu"),
        (0, "fan_out", "relu"),
        (0, "fan_in", "tanh"),
    ],
)
def test_kaiming(a, mode, nonlinearity):
    shape = (64, 32, 3, 3)
    fan = (32 if mode == "fan_in" else 64) * 9
    std = init.calculate_gain(nonlinearity, a) / math.sqrt(fan)
    data = init.kaiming_uniform_(serve.empty(*shape), a, mode, nonlinearity).numpy()
    assert np.abs(data).max() <= std * math.sqrt(3) and data.std() == pytest.approx(std, rel=0.03)
    data = init.kaiming_normal_(serve.empty(*shape), a, mode, nonlinearity).numpy()
    assert data.std() == pytest.approx(std, rel=0.03)


def test_kaiming_errors_and_empty_tensors():
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        init.kaiming_uniform_(serve.empty(3, 4), mode="fan_avg")
    with pytest.warns(UserWarning, match="zero-element tensors is a no-op"):
        init.kaiming_normal_(serve.empty(0, 4))


@needs_torch
@pytest.mark.parametrize(
    ("mean", "std", "a", "b"), [(0.0, 1.0, -2.0, 2.0), (0.5, 0.2, 0.5, 0.6), (0.0, 0.02, -0.04, 0.04)]
)
def test_trunc_normal_matches_torch_distribution(mean, std, a, b):
    ours = init.trunc_normal_(serve.empty(100_000), mean, std, a, b).numpy()
    ref = torch.nn.init.trunc_normal_(torch.empty(100_000), mean, std, a, b).numpy()
    assert ours.min() >= a and ours.max() <= b
    assert ours.mean() == pytest.approx(ref.mean(), abs=0.01 * std + 1e-4)
    assert ours.std() == pytest.approx(ref.std(), rel=0.02)


@needs_torch
def test_erfinv_backend_matches_torch():
    x = np.linspace(-0.999999, 0.999999, 2001)
    np.testing.assert_allclose(ops_cpu.erfinv(x), torch.erfinv(torch.tensor(x)).numpy(), rtol=1e-12, atol=1e-12)
    assert ops_cpu.erfinv(np.array([1.0, -1.0])).tolist() == [math.inf, -math.inf]


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 2, 3)])
def test_orthogonal(shape):
    w = init.orthogonal_(_param(*shape), gain=2.0).detach().numpy().reshape(shape[0], -1)
    rows, cols = w.shape
    gram = w @ w.T if rows <= cols else w.T @ w
    np.testing.assert_allclose(gram, 4.0 * np.eye(min(rows, cols)), atol=1e-5)
    with pytest.raises(ValueError, match="2 or more dimensions"):
        init.orthogonal_(serve.empty(3))
