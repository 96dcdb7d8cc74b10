"""In-place operations against PyTorch: values, views updating their base, the leaf rule, and gradients."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from serve.tensor import versions
from tests.helpers import assert_close, needs_torch, torch

BASE = (np.arange(12, dtype=np.float32).reshape(3, 4) - 5) / 2

OPS = {
    "add_": lambda x, lib: x.add_(2.0),
    "add_alpha": lambda x, lib: x.add_(lib.ones(4), alpha=3),
    "sub_": lambda x, lib: x.sub_(lib.arange(4.0)),
    "mul_": lambda x, lib: x.mul_(-1.5),
    "div_": lambda x, lib: x.div_(lib.tensor([[2.0], [4.0], [8.0]])),
    "clamp_": lambda x, lib: x.clamp_(-1, 1),
    "clamp_min": lambda x, lib: x.clamp_(min=0),
    "masked_fill_": lambda x, lib: x.masked_fill_(x > 1, 0.25),
    "copy_": lambda x, lib: x.copy_(lib.arange(4.0)),
    "copy_int": lambda x, lib: x.copy_(lib.tensor([1, 2, 3, 4])),
    "fill_": lambda x, lib: x.fill_(3),
    "fill_tensor": lambda x, lib: x.fill_(lib.tensor(2.5)),
    "zero_": lambda x, lib: x.zero_(),
    "neg_": lambda x, lib: x.neg_(),
    "abs_": lambda x, lib: x.abs_(),
    "exp_": lambda x, lib: x.exp_(),
    "tanh_": lambda x, lib: x.tanh_(),
    "relu_": lambda x, lib: x.relu_(),
    "tril_": lambda x, lib: x.tril_(),
    "pow_": lambda x, lib: x.pow_(2),
}


def _iadd(x, lib):
    x += 1
    return x


def _isub(x, lib):
    x -= lib.ones(3, 1)
    return x


def _imul(x, lib):
    x *= lib.arange(4.0)
    return x


def _idiv(x, lib):
    x /= 4
    return x


OPS.update({"iadd": _iadd, "isub": _isub, "imul": _imul, "idiv": _idiv})


@needs_torch
@pytest.mark.parametrize("name", list(OPS))
def test_inplace_values(name):
    outs = []
    for lib in (serve, torch):
        x = lib.tensor(BASE.copy())
        out = OPS[name](x, lib)
        assert out is x  # in-place returns self
        outs.append(x)
    assert_close(*outs)


@needs_torch
@pytest.mark.parametrize("name", list(OPS))
def test_inplace_through_view_updates_base(name):
    outs = []
    for lib in (serve, torch):
        base = lib.tensor(np.stack([BASE, BASE + 1]))
        view = base[1]
        OPS[name](view, lib)
        outs.append(base)
    assert_close(*outs)


@needs_torch
@pytest.mark.parametrize("name", ["add_", "mul_", "clamp_", "copy_", "fill_", "zero_", "iadd", "imul"])
def test_inplace_through_transposed_view(name):
    outs = []
    for lib in (serve, torch):
        base = lib.tensor(BASE.T.copy())
        OPS[name](base.t(), lib)
        outs.append(base)
    assert_close(*outs)


def test_iadd_keeps_identity_and_shares():
    x = serve.zeros(3)
    arr = x.numpy()
    y = x
    y += 2
    assert y is x and arr.tolist() == [2.0, 2.0, 2.0]


# ---- leaf rule --------------------------------------------------------------------------------------
LEAF_MSG = "a leaf Variable that requires grad is being used in an in-place operation."


@pytest.mark.parametrize("name", [n for n in OPS if n not in ("copy_int",)])
def test_leaf_rule(name):
    x = serve.tensor(BASE.copy(), requires_grad=True)
    with pytest.raises(RuntimeError, match=LEAF_MSG):
        OPS[name](x, serve)
    assert x.tolist() == BASE.tolist()  # nothing was written
    with serve.no_grad():
        OPS[name](x, serve)
    assert x.requires_grad and x.is_leaf and x.grad_fn is None


def test_leaf_rule_through_view():
    x = serve.ones(2, 3, requires_grad=True)
    v = x[0]
    with pytest.raises(RuntimeError, match=r"(leaf Variable|view of a leaf Variable)"):
        v.add_(1)


# ---- non-leaf in place with gradients ----------------------------------------------------------------
def _chain_mul(lib, x):
    y = x * 2
    y.mul_(x)
    return y


def _chain_add_view(lib, x):
    y = x.clone()
    y[0].add_(5.0)
    return y * x


def _chain_iops(lib, x):
    y = x + 0
    y += x
    y *= x
    y /= 3
    y -= 1
    return y


def _chain_exp(lib, x):
    y = x * 1.0
    return y.exp_().sin()


def _chain_clamp(lib, x):
    y = x * 3
    y.clamp_(-1, 1)
    return y


def _chain_masked_fill(lib, x):
    y = x * x
    y.masked_fill_(x > 0.5, 0.0)
    return y


def _chain_copy(lib, x):
    y = lib.zeros(3, 4)
    y.copy_(x * 2)
    return y


def _chain_copy_into_part(lib, x):
    y = x.clone()
    y[1:].copy_(x[:2] * x[:2])
    return y


def _chain_fill(lib, x):
    y = x * 2
    y[1].fill_(7.0)
    return y * x


def _chain_zero(lib, x):
    y = x * 2
    y.zero_()
    return y + x


@needs_torch
@pytest.mark.parametrize(
    "fn",
    [_chain_mul, _chain_add_view, _chain_iops, _chain_exp, _chain_clamp, _chain_masked_fill, _chain_copy,
     _chain_copy_into_part, _chain_fill, _chain_zero],
)  # fmt: skip
def test_inplace_non_leaf_gradients(fn):
    results = []
    for lib in (serve, torch):
        x = lib.tensor(BASE.copy() / 3, requires_grad=True)
        out = fn(lib, x)
        assert out.grad_fn is not None and not out.is_leaf
        (out * lib.arange(12.0).view(3, 4)).sum().backward()
        results.append((out, x.grad))
    assert_close(results[0][0], results[1][0])
    assert_close(results[0][1], results[1][1])


def test_inplace_version_gets_grad_fn_name():
    x = serve.ones(2, requires_grad=True)
    y = x * 1
    y.add_(1)
    assert "Backward" in repr(y)


# ---- dtype rules --------------------------------------------------------------------------------------
def test_int_inplace_with_float_raises():
    x = serve.tensor([1, 2, 3])
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        x += 1.5
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        x.mul_(serve.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        x /= 2
    assert x.tolist() == [1, 2, 3]
    x += 2
    x *= serve.tensor(2, dtype=serve.int32)
    assert x.tolist() == [6, 8, 10] and x.dtype == serve.int64
    b = serve.tensor([True, False])
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Bool"):
        b += 1


@needs_torch
def test_float_inplace_keeps_dtype():
    for lib in (serve, torch):
        x = lib.ones(3, dtype=lib.float16)
        x += lib.ones(3, dtype=lib.float64)
        x.mul_(2)
        assert str(x.dtype).endswith("float16")


def test_inplace_broadcast_shape_error():
    x = serve.zeros(3)
    with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"):
        x += serve.ones(2, 3)
    with pytest.raises(RuntimeError):
        x.copy_(serve.ones(4))


def test_copy_between_dtypes_and_shares():
    x = serve.zeros(2, 2, dtype=serve.int32)
    x.copy_(serve.tensor([[1.9, -2.7], [3.0, 4.5]]))
    assert x.tolist() == [[1, -2], [3, 4]]
    b = serve.zeros(3, dtype=serve.bool)
    b.copy_(serve.tensor([0.0, 2.0, 0.0]))
    assert b.tolist() == [False, True, False]
    with pytest.raises(TypeError, match="must be Tensor"):
        x.copy_([1, 2])
    with pytest.raises(RuntimeError, match="fill_ only supports 0-dimension value tensor"):
        x.fill_(serve.ones(2))


def test_direct_inplace_path_matches_the_general_one():
    # float tensors with no graph take one ufunc into the storage; results, views and versions must not change
    base = serve.arange(12, dtype=serve.float32).reshape(3, 4)
    view = base[1:]
    before = versions.version(base._data)
    with serve.no_grad():
        view += serve.ones(4)
        view *= 2
        view.sub_(serve.tensor([[1.0], [2.0]]))
        view /= 4
    expected = (np.arange(12, dtype=np.float32).reshape(3, 4)[1:] + 1) * 2
    expected = (expected - np.array([[1.0], [2.0]], dtype=np.float32)) / 4
    np.testing.assert_allclose(base.numpy()[1:], expected)
    assert versions.version(base._data) == before + 4
    x = serve.ones(2, 3)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        x += serve.ones(4, 2, 3)
    ints = serve.ones(2, dtype=serve.int64)
    with pytest.raises(RuntimeError, match="can't be cast"):
        ints += 1.5
