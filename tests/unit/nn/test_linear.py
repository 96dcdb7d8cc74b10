"""F.linear / F.bilinear and nn.Linear / nn.Bilinear against PyTorch."""

import math

import numpy as np
import pytest

import serve
from serve import nn
from tests.helpers import assert_close, check_op, needs_torch, torch

TOL = {"rtol": 1e-5, "atol": 1e-5}


@pytest.mark.parametrize(
    "shapes",
    [[(3, 5), (4, 5), (4,)], [(3, 5), (4, 5)], [(5,), (4, 5), (4,)], [(2, 3, 5), (4, 5), (4,)], [(2, 3, 5), (5,), ()]],
    ids=["2d", "no_bias", "1d_input", "3d_input", "1d_weight"],
)
def test_linear_matches_torch(shapes):
    check_op(shapes, lambda lib, *xs: lib.nn.functional.linear(*xs), **TOL)


def test_linear_broadcast_bias():
    check_op([(2, 3, 5), (4, 5), (1, 4)], lambda lib, *xs: lib.nn.functional.linear(*xs), **TOL)


def test_linear_second_derivative():
    def grad_of_grad(lib, x, w, b):
        y = (lib.nn.functional.linear(x, w, b) ** 2).sum()
        gx, gw = lib.autograd.grad(y, (x, w), create_graph=True)
        return gx * 1.0, gw * 1.0

    check_op([(3, 5), (4, 5), (4,)], grad_of_grad, fd=False, **TOL)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_linear_other_dtypes(dtype):
    tol = {"float16": 2e-3, "bfloat16": 1e-2, "float64": 1e-12}[dtype]
    check_op([(6, 32), (8, 32), (8,)], lambda lib, *xs: lib.nn.functional.linear(*xs), dtype=dtype, grad=False,
             atol=tol, rtol=tol, low=-1, high=1)  # fmt: skip


def test_linear_under_no_grad_records_nothing():
    w = serve.randn(4, 5, requires_grad=True)
    with serve.no_grad():
        y = serve.nn.functional.linear(serve.randn(3, 5), w)
    assert y.grad_fn is None and not y.requires_grad


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (((2, 5), (3, 4)), r"mat1 and mat2 shapes cannot be multiplied \(2x5 and 4x3\)"),
        (((2, 4), (3, 4), (5,)), "bias of shape"),
        (((), (3, 4)), "at least 1D"),
    ],
)
def test_linear_errors(args, match):
    tensors = [serve.randn(*s) for s in args]
    for grad in (False, True):
        if grad:
            tensors[1].requires_grad_()
        with pytest.raises(RuntimeError, match=match):
            serve.nn.functional.linear(*tensors)


def test_linear_dtype_mismatch_raises():
    with pytest.raises(RuntimeError, match="same dtype"):
        serve.nn.functional.linear(serve.randn(2, 4), serve.randn(3, 4, dtype=serve.float64))


def test_bilinear_matches_torch():
    check_op([(3, 4), (3, 5), (6, 4, 5), (6,)], lambda lib, *xs: lib.nn.functional.bilinear(*xs), **TOL)
    check_op([(2, 3, 4), (2, 3, 5), (6, 4, 5)], lambda lib, *xs: lib.nn.functional.bilinear(*xs), **TOL)


@pytest.mark.parametrize(
    ("shapes", "match"),
    [
        ([(2, 5), (2, 3), (7, 4, 3)], "input1 size does not match weight size: got 5 but expected 4"),
        ([(2, 4), (2, 2), (7, 4, 3)], "input2 size does not match weight size: got 2 but expected 3"),
        ([(2, 4), (3, 3), (7, 4, 3)], "input batch dimensions do not match at dim 0: got 2 and 3"),
        ([(2, 4), (2, 3), (7, 4, 3), (6,)], "bias size does not match weight size: got 6 but expected 7"),
    ],
)
def test_bilinear_errors(shapes, match):
    with pytest.raises(RuntimeError, match=match):
        serve.nn.functional.bilinear(*[serve.randn(*s) for s in shapes])


# ---- modules ------------------------------------------------------------------------------------------
def _copy_params(ours, ref):
    for name, p in ref.named_parameters():
        getattr(ours, name).data = serve.tensor(p.detach().numpy())


@needs_torch
@pytest.mark.parametrize("bias", [True, False])
def test_linear_module_matches_torch(bias):
    ours, ref = nn.Linear(5, 3, bias=bias), torch.nn.Linear(5, 3, bias=bias)
    assert repr(ours) == repr(ref)
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == {
        k: tuple(v.shape) for k, v in ref.state_dict().items()
    }
    ours.load_state_dict({k: serve.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    x = np.random.default_rng(0).normal(size=(4, 2, 5)).astype(np.float32)
    xs, xt = serve.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ys, yt = ours(xs), ref(xt)
    assert_close(ys, yt, **TOL)
    ys.sum().backward()
    yt.sum().backward()
    assert_close(xs.grad, xt.grad, **TOL)
    assert_close(ours.weight.grad, ref.weight.grad, **TOL)
    if bias:
        assert_close(ours.bias.grad, ref.bias.grad, **TOL)


def test_linear_module_init_bounds():
    layer = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)
    w, b = layer.weight.detach().numpy(), layer.bias.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert w.std() == pytest.approx(bound / math.sqrt(3), rel=0.02)
    assert abs(w.mean()) < 0.05 * bound
    assert layer.weight.requires_grad and layer.weight.dtype == serve.float32


def test_linear_module_dtype_and_wrong_features():
    layer = nn.Linear(4, 2, dtype=serve.float64)
    assert layer.weight.dtype == serve.float64 and layer.bias.dtype == serve.float64
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        nn.Linear(4, 3)(serve.randn(2, 5))


@needs_torch
def test_bilinear_module_matches_torch():
    ours, ref = nn.Bilinear(4, 5, 3), torch.nn.Bilinear(4, 5, 3)
    assert repr(ours) == repr(ref)
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert ours.weight.shape == ref.weight.shape
    bound = 1 / math.sqrt(4)
    assert np.abs(ours.weight.detach().numpy()).max() <= bound
    _copy_params(ours, ref)
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(6, 4)).astype(np.float32), rng.normal(size=(6, 5)).astype(np.float32)
    assert_close(ours(serve.tensor(a), serve.tensor(b)), ref(torch.tensor(a), torch.tensor(b)), **TOL)
    assert repr(nn.Bilinear(2, 3, 4, bias=False)) == repr(torch.nn.Bilinear(2, 3, 4, bias=False))
