"""Activations, functional and modules, against PyTorch: values, input gradients, in-place forms, half precision."""

import numpy as np
import pytest

import serve
from serve import nn
from tests.helpers import assert_close, check_op, needs_torch, torch

F_CASES = {
    "relu": lambda F, x: F.relu(x),
    "relu6": lambda F, x: F.relu6(x),
    "leaky_relu": lambda F, x: F.leaky_relu(x, 0.2),
    "elu": lambda F, x: F.elu(x, alpha=0.7),
    "selu": lambda F, x: F.selu(x),
    "celu": lambda F, x: F.celu(x, alpha=1.5),
    "gelu": lambda F, x: F.gelu(x),
    "gelu_tanh": lambda F, x: F.gelu(x, approximate="tanh"),
    "silu": lambda F, x: F.silu(x),
    "mish": lambda F, x: F.mish(x),
    "hardswish": lambda F, x: F.hardswish(x),
    "hardsigmoid": lambda F, x: F.hardsigmoid(x),
    "hardtanh": lambda F, x: F.hardtanh(x, -0.5, 2.0),
    "sigmoid": lambda F, x: F.sigmoid(x),
    "tanh": lambda F, x: F.tanh(x),
    "softmax": lambda F, x: F.softmax(x, dim=1),
    "log_softmax": lambda F, x: F.log_softmax(x, dim=-1),
    "softmin": lambda F, x: F.softmin(x, dim=0),
    "softplus": lambda F, x: F.softplus(x),
    "softplus_beta": lambda F, x: F.softplus(x, beta=2.0, threshold=3.0),
    "softsign": lambda F, x: F.softsign(x),
    "logsigmoid": lambda F, x: F.logsigmoid(x),
    "glu": lambda F, x: F.glu(x, dim=1),
    "threshold": lambda F, x: F.threshold(x, 0.3, -2.0),
}


@pytest.mark.parametrize("name", F_CASES)
def test_functional_matches_torch(name):
    fn = F_CASES[name]
    check_op([(4, 6)], lambda lib, x: fn(lib.nn.functional, x), low=-5, high=5, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["gelu", "gelu_tanh", "silu", "elu", "mish", "softplus", "logsigmoid", "hardswish"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision(name, dtype):
    fn = F_CASES[name]
    tol = 1e-2 if dtype == "bfloat16" else 2e-3
    check_op([(3, 8)], lambda lib, x: fn(lib.nn.functional, x), dtype=dtype, grad=False, low=-4, high=4,
             atol=tol, rtol=tol)  # fmt: skip


@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 4), (5,)])
def test_prelu(shape):
    channels = shape[1] if len(shape) > 1 else 1
    check_op([shape, (channels,)], lambda lib, x, w: lib.nn.functional.prelu(x, w), rtol=1e-5, atol=1e-6)
    check_op([shape, (1,)], lambda lib, x, w: lib.nn.functional.prelu(x, w), rtol=1e-5, atol=1e-6)


def test_prelu_rejects_wrong_parameter_count():
    with pytest.raises(RuntimeError, match="parameter numbers = 2 and channel size = 3"):
        serve.nn.functional.prelu(serve.randn(2, 3), serve.ones(2))


def test_second_derivative_of_gelu_and_silu():
    for name in ("gelu", "silu", "elu", "softplus", "mish"):
        check_op([(7,)], lambda lib, x, n=name: _grad_of(lib, x, F_CASES[n]), rtol=1e-5, atol=1e-6, fd=False)


def _grad_of(lib, x, fn):
    y = fn(lib.nn.functional, x).sum()
    (g,) = lib.autograd.grad(y, x, create_graph=True)
    return g


@pytest.mark.parametrize("name", ["relu", "relu6", "leaky_relu", "elu", "selu", "celu", "silu", "mish", "hardswish",
                                  "hardsigmoid", "hardtanh", "threshold"])  # fmt: skip
def test_inplace_writes_into_input_and_keeps_gradient(name):
    F = serve.nn.functional
    kwargs = {"threshold": (0.3, -2.0), "hardtanh": (-0.5, 2.0)}.get(name, ())
    data = np.random.default_rng(0).uniform(-4, 4, (3, 5)).astype(np.float32)
    leaf = serve.tensor(data, requires_grad=True)
    x = leaf * 1.0
    y = getattr(F, name)(x, *kwargs, inplace=True)
    assert y is x
    expected = getattr(F, name)(serve.tensor(data), *kwargs)
    assert_close(y, expected, atol=1e-6, rtol=1e-5)
    y.sum().backward()
    ref = serve.tensor(data, requires_grad=True)
    getattr(F, name)(ref, *kwargs).sum().backward()
    assert_close(leaf.grad, ref.grad, atol=1e-6, rtol=1e-5)


def test_inplace_underscore_aliases():
    F = serve.nn.functional
    x = serve.tensor([-1.0, 2.0])
    assert F.relu_(x) is x and x.tolist() == [0.0, 2.0]
    x = serve.tensor([-1.0, 2.0])
    F.leaky_relu_(x, 0.5)
    assert x.tolist() == [-0.5, 2.0]
    x = serve.tensor([-3.0, 3.0])
    F.hardtanh_(x)
    assert x.tolist() == [-1.0, 1.0]


def test_inplace_relu_without_graph_writes_storage_and_bumps_version():
    base = serve.tensor([[-1.0, 2.0], [3.0, -4.0]])
    with serve.no_grad():
        serve.nn.functional.relu(base[1], inplace=True)
    assert base.tolist() == [[-1.0, 2.0], [3.0, 0.0]]
    w = serve.randn(2, requires_grad=True)
    x = serve.tensor([-1.0, 2.0])
    y = (w * x).sum()  # the product saves x for its gradient
    serve.nn.functional.relu(x, inplace=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_inplace_on_leaf_requiring_grad_raises():
    with pytest.raises(RuntimeError, match="leaf Variable"):
        serve.nn.functional.elu(serve.randn(3, requires_grad=True), inplace=True)


def test_no_grad_path_records_nothing():
    x = serve.randn(4, 6, requires_grad=True)
    with serve.no_grad():
        for fn in F_CASES.values():
            y = fn(serve.nn.functional, x)
            assert y.grad_fn is None and not y.requires_grad


def test_integer_input_is_rejected_like_torch():
    for fn in (serve.nn.functional.gelu, serve.nn.functional.silu, serve.nn.functional.elu):
        with pytest.raises(RuntimeError, match="not implemented for"):
            fn(serve.tensor([1, 2]))
    assert serve.nn.functional.relu6(serve.tensor([-1, 3, 9])).tolist() == [0, 3, 6]


def test_glu_odd_dimension_raises():
    with pytest.raises(RuntimeError, match="Halving dimension must be even"):
        serve.nn.functional.glu(serve.randn(2, 5))


def test_softmax_without_dim_warns_and_uses_torch_rule():
    x = serve.randn(2, 3)
    with pytest.warns(UserWarning, match="Implicit dimension"):
        y = serve.nn.functional.softmax(x)
    assert_close(y, serve.nn.functional.softmax(x, dim=1))


@needs_torch
def test_softmax_dtype_argument():
    x = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    ours = serve.nn.functional.log_softmax(serve.tensor(x), dim=1, dtype=serve.float64)
    ref = torch.nn.functional.log_softmax(torch.tensor(x), dim=1, dtype=torch.float64)
    assert_close(ours, ref, atol=1e-12, rtol=1e-12)


def test_threshold_keeps_nan_like_torch():
    y = serve.nn.functional.threshold(serve.tensor([float("nan"), 1.0, 0.0]), 0.5, 7.0)
    assert np.isnan(y[0].item()) and y[1:].tolist() == [1.0, 7.0]


# ---- modules ------------------------------------------------------------------------------------------
MODULES = [
    ("ReLU", (), {}), ("ReLU6", (), {}), ("LeakyReLU", (0.1,), {}), ("ELU", (), {"alpha": 0.5}), ("SELU", (), {}),
    ("CELU", (), {"alpha": 2.0}), ("GELU", (), {"approximate": "tanh"}), ("GELU", (), {}), ("SiLU", (), {}),
    ("Mish", (), {}), ("Hardswish", (), {}), ("Hardsigmoid", (), {}), ("Hardtanh", (-2.0, 1.5), {}),
    ("Sigmoid", (), {}), ("Tanh", (), {}), ("Softmax", (), {"dim": 1}), ("LogSoftmax", (), {"dim": 1}),
    ("Softmin", (), {"dim": 1}), ("Softplus", (), {"beta": 1.5, "threshold": 4}), ("Softsign", (), {}),
    ("LogSigmoid", (), {}), ("GLU", (), {"dim": 1}), ("Threshold", (0.1, 20.0), {}),
]  # fmt: skip


@needs_torch
@pytest.mark.parametrize(("name", "args", "kwargs"), MODULES, ids=[m[0] + str(i) for i, m in enumerate(MODULES)])
def test_module_matches_torch(name, args, kwargs):
    ours, ref = getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    assert repr(ours) == repr(ref)
    assert ours.state_dict().keys() == ref.state_dict().keys()
    check_op([(3, 4, 2)], lambda lib, x: (ours if lib is serve else ref)(x), low=-5, high=5, rtol=1e-5, atol=1e-6)


@needs_torch
def test_inplace_module_repr():
    for name in ("ReLU", "ReLU6", "SiLU", "Hardswish", "Mish", "ELU", "LeakyReLU", "SELU", "CELU", "Hardsigmoid"):
        assert repr(getattr(nn, name)(inplace=True)) == repr(getattr(torch.nn, name)(inplace=True))
    assert repr(nn.Threshold(0.5, 1.0, inplace=True)) == repr(torch.nn.Threshold(0.5, 1.0, inplace=True))
    assert repr(nn.Softmax()) == repr(torch.nn.Softmax())


@needs_torch
@pytest.mark.parametrize(("num_parameters", "shape"), [(1, (2, 3, 4)), (3, (2, 3, 4)), (3, (2, 3))])
def test_prelu_module(num_parameters, shape):
    ours, ref = nn.PReLU(num_parameters, init=0.3), torch.nn.PReLU(num_parameters, init=0.3)
    assert repr(ours) == repr(ref)
    assert ours.weight.shape == ref.weight.shape
    assert list(ours.state_dict()) == list(ref.state_dict())
    x = np.random.default_rng(1).normal(size=shape).astype(np.float32)
    xs, xt = serve.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ys, yt = ours(xs), ref(xt)
    assert_close(ys, yt, atol=1e-6, rtol=1e-5)
    ys.sum().backward()
    yt.sum().backward()
    assert_close(xs.grad, xt.grad, atol=1e-6, rtol=1e-5)
    assert_close(ours.weight.grad, ref.weight.grad, atol=1e-5, rtol=1e-5)


def test_hardtanh_rejects_inverted_bounds():
    with pytest.raises(ValueError, match="min_val cannot be greater than max_val"):
        nn.Hardtanh(2.0, 1.0)
