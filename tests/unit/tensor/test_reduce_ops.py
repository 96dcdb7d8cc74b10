"""Reductions against PyTorch: values, dtypes, keepdim/dim forms, gradients, and error cases."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from tests.helpers import assert_close, check_op, needs_torch, torch

DIMS = [None, 0, 1, -1, (0, 2), (-1, 0), (0, 1, 2), ()]


def _kw(dim, keepdim):
    return {} if dim is None and not keepdim else {"dim": dim, "keepdim": keepdim}


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "var", "std", "nansum"])
def test_multi_dim_reductions(name, dim, keepdim):
    if dim is None and keepdim and name in ("amax", "amin"):
        dim = ()
    # torch's var/std backward with dim=() counts one element per reduction and returns inf: compare values only
    grad = not (dim == () and name in ("var", "std"))
    check_op([(2, 3, 4)], lambda lib, x: getattr(x, name)(**_kw(dim, keepdim)), grad=grad)


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "var", "std", "prod", "norm"])
def test_zero_dim_input(name):
    check_op([()], lambda lib, x: getattr(x, name)())
    if name not in ("norm", "prod"):
        check_op(
            [()],
            lambda lib, x: (
                getattr(x, name)(0, keepdim=True) if name not in ("var", "std") else getattr(x, name)(0, correction=0)
            ),
        )


@pytest.mark.parametrize("name", ["sum", "mean", "prod"])
@pytest.mark.parametrize("dim", [0, 1], ids=str)
def test_empty_input(name, dim):
    check_op([(0, 3)], lambda lib, x: getattr(x, name)(dim))
    check_op([(0, 3)], lambda lib, x: getattr(x, name)())


@pytest.mark.parametrize("correction", [0, 1, 2])
@pytest.mark.parametrize("dim", [None, 1, (0, 1)], ids=str)
def test_var_std_correction(correction, dim):
    check_op([(3, 5)], lambda lib, x: x.var(dim, correction=correction))
    check_op([(3, 5)], lambda lib, x: lib.std(x, dim, correction=correction, keepdim=True))


def test_var_unbiased_flag():
    check_op([(3, 5)], lambda lib, x: x.var(1, unbiased=False))
    check_op([(3, 5)], lambda lib, x: x.std(unbiased=False))
    check_op([(3, 5)], lambda lib, x: x.var(False))
    check_op([(3, 5)], lambda lib, x: lib.var_mean(x, 1))
    check_op([(3, 5)], lambda lib, x: lib.std_mean(x, (0, 1), correction=0))


@needs_torch
def test_var_of_single_element_is_nan():
    for dim in (None, 0):
        assert_close(serve.tensor([3.0]).var(dim), torch.tensor([3.0]).var(dim))


@pytest.mark.parametrize("dim", [None, 0, 1, -1], ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_prod_with_zeros_gradient(dim, keepdim):
    x = np.array([[1.5, 0.0, 2.0], [0.0, 0.0, 3.0], [0.5, -1.0, 2.0]], dtype=np.float32)
    kw = {} if dim is None else {"dim": dim, "keepdim": keepdim}
    check_op([x], lambda lib, t: t.prod(**kw))
    check_op([(3, 4)], lambda lib, t: lib.prod(t, **kw))


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool", "uint8", "int8"])
@pytest.mark.parametrize("name", ["sum", "prod", "cumsum", "amax", "amin", "nansum"])
def test_int_inputs(name, dtype):
    def f(lib, x):
        if name == "cumsum":
            return x.cumsum(1)
        if name == "nansum" and dtype == "bool":
            return x.sum()
        return getattr(x, name)() if name != "prod" else (x.prod(), x.prod(0))

    check_op([(3, 4)], f, dtype=dtype, low=0, high=3)
    if name in ("sum", "amax"):
        check_op([(3, 4)], lambda lib, x: getattr(x, name)(1, keepdim=True), dtype=dtype, low=0, high=3)


@needs_torch
def test_sum_dtype_argument():
    for dt in ("float64", "int32", "float16"):
        assert_close(
            serve.tensor([1, 2, 3]).sum(dtype=getattr(serve, dt)), torch.tensor([1, 2, 3]).sum(dtype=getattr(torch, dt))
        )
    assert_close(
        serve.tensor([[1.5, 2.5]]).sum(1, dtype=serve.float64), torch.tensor([[1.5, 2.5]]).sum(1, dtype=torch.float64)
    )


def test_mean_of_ints_raises():
    with pytest.raises(RuntimeError, match="mean\\(\\): could not infer output dtype"):
        serve.tensor([1, 2]).mean()
    assert serve.tensor([1, 2]).mean(dtype=serve.float32).item() == 1.5


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "name", ["sum", "mean", "var", "std", "amax", "prod", "norm", "softmax", "log_softmax", "cumsum"]
)
def test_half_precision(name, dtype):
    def f(lib, x):
        if name in ("softmax", "log_softmax", "cumsum"):
            return getattr(x, name)(-1)
        if name == "prod":
            return x.prod(1)
        return getattr(x, name)(1) if name != "norm" else x.norm(dim=1)

    check_op([(4, 64)], f, dtype=dtype, low=0.5, high=1.5, atol=2e-2, rtol=2e-2, grad_atol=5e-2)


@needs_torch
def test_half_sum_accumulates_in_float32():
    xs = serve.full((4096,), 0.1, dtype=serve.float16)
    xt = torch.full((4096,), 0.1, dtype=torch.float16)
    assert_close(xs.sum(), xt.sum(), atol=0.5, rtol=1e-3)
    assert_close(xs.mean(), xt.mean(), atol=1e-3, rtol=1e-3)


# ---- max / min ----------------------------------------------------------------------------------------
def _distinct(shape, seed=0):
    n = int(np.prod(shape))
    return (np.random.default_rng(seed).permutation(n).astype(np.float32) / n - 0.5).reshape(shape)


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_no_dim(name):
    check_op([_distinct((3, 4))], lambda lib, x: getattr(x, name)())
    check_op([_distinct((3, 4))], lambda lib, x: getattr(lib, name)(x))
    check_op([()], lambda lib, x: getattr(x, name)())


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1, 2])
@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_with_dim(name, dim, keepdim):
    check_op([_distinct((2, 3, 4))], lambda lib, x: tuple(getattr(x, name)(dim, keepdim)))
    check_op([_distinct((2, 3, 4))], lambda lib, x: tuple(getattr(lib, name)(x, dim=dim, keepdim=keepdim)))


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_namedtuple(name):
    out = getattr(serve.tensor([[1.0, 5.0], [7.0, 2.0]]), name)(1)
    values, indices = out
    assert out.values is values and out.indices is indices
    assert indices.dtype is serve.int64
    assert indices.tolist() == ([1, 0] if name == "max" else [0, 1])


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_with_other_tensor(name):
    check_op([_distinct((2, 3)), _distinct((3,), 1)], lambda lib, x, y: getattr(lib, name)(x, y))
    check_op([_distinct((2, 3)), _distinct((3,), 1)], lambda lib, x, y: getattr(x, name)(y))


@needs_torch
def test_max_min_with_dim_on_zero_dim_and_int():
    for lib in (serve, torch):
        x = lib.tensor(3.0)
        v, i = x.max(0)
        assert v.item() == 3.0 and i.item() == 0
    check_op([(3, 4)], lambda lib, x: tuple(x.max(1)), dtype="int64", low=0, high=100)
    check_op([(3, 4)], lambda lib, x: tuple(x.min(0, keepdim=True)), dtype="int32", low=0, high=100)


@needs_torch
def test_max_ties_give_first_index():
    x = [[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]]
    for name in ("max", "min", "argmax", "argmin"):
        ours = getattr(serve.tensor(x), name)(1)
        theirs = getattr(torch.tensor(x), name)(1)
        ours, theirs = (ours.indices, theirs.indices) if name in ("max", "min") else (ours, theirs)
        assert_close(ours, theirs)


@needs_torch
def test_max_with_nan():
    x = [[1.0, float("nan"), 3.0], [0.0, 1.0, 2.0]]
    for f in (
        lambda t: t.max(),
        lambda t: t.amax(1),
        lambda t: t.max(1).values,
        lambda t: t.min(1).indices,
        lambda t: t.argmax(1),
    ):
        assert_close(f(serve.tensor(x)), f(torch.tensor(x)))


@needs_torch
def test_amax_ties_share_gradient():
    x = [[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]
    for f in (lambda t: t.amax(1), lambda t: t.amax(), lambda t: t.max(), lambda t: t.amin((0, 1))):
        xs, xt = serve.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        f(xs).sum().backward()
        f(xt).sum().backward()
        assert_close(xs.grad, xt.grad)


def test_max_min_errors():
    with pytest.raises(RuntimeError, match=r"max\(\): Expected reduction dim to be specified for input.numel\(\) == 0"):
        serve.zeros(0, 3).max()
    with pytest.raises(IndexError, match=r"max\(\): Expected reduction dim 0 to have non-zero size"):
        serve.zeros(0, 3).max(0)
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"):
        serve.zeros(2, 3).max(2)
    with pytest.raises(IndexError, match="Dimension out of range"):
        serve.zeros(2, 3).sum(-3)
    with pytest.raises(RuntimeError, match="appears multiple times"):
        serve.zeros(2, 3).sum((0, -2))


@needs_torch
def test_amax_on_empty_dim():
    assert_close(serve.zeros(0, 3).amax(1), torch.zeros(0, 3).amax(1))
    with pytest.raises((RuntimeError, IndexError)):
        serve.zeros(0, 3).amax(0)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin(name, dim, keepdim):
    check_op([_distinct((3, 4))], lambda lib, x: getattr(x, name)(dim, keepdim))
    check_op([_distinct((3, 4))], lambda lib, x: getattr(lib, name)(x, dim=dim, keepdim=keepdim))
    check_op([(3, 4)], lambda lib, x: getattr(x, name)(dim, keepdim), dtype="int64", low=0, high=1000)


@needs_torch
def test_argmax_zero_dim_and_empty():
    for dim in (None, 0, -1):
        assert_close(serve.tensor(2.0).argmax(dim), torch.tensor(2.0).argmax(dim))
        assert_close(serve.tensor(2.0).argmax(dim, keepdim=True), torch.tensor(2.0).argmax(dim, keepdim=True))
    with pytest.raises(RuntimeError, match="argmax"):
        serve.zeros(0).argmax()
    assert_close(serve.zeros(0, 3).argmax(1), torch.zeros(0, 3).argmax(1))


# ---- cumsum, norm, softmax, all/any ---------------------------------------------------------------
@pytest.mark.parametrize("dim", [0, 1, -1, 2])
def test_cumsum(dim):
    check_op([(2, 3, 4)], lambda lib, x: x.cumsum(dim))
    check_op([(2, 3, 4)], lambda lib, x: lib.cumsum(x, dim=dim, dtype=lib.float64))
    check_op([(2, 3, 4)], lambda lib, x: x.cumsum(dim), dtype="int32", low=-5, high=5)


def test_cumsum_zero_dim_and_empty():
    check_op([()], lambda lib, x: x.cumsum(0))
    check_op([(0, 3)], lambda lib, x: x.cumsum(0))
    check_op([()], lambda lib, x: x.cumsum(-1), dtype="int32", low=0, high=5)


NORMS = [2, 1, float("inf"), float("-inf"), "fro", 3, 0.5, 0]


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [None, 1, -1, (0, 1)], ids=str)
@pytest.mark.parametrize("p", NORMS, ids=str)
def test_norm(p, dim, keepdim):
    if p == "fro" and isinstance(dim, int):
        dim = (dim,)
    check_op([_distinct((3, 4)) * 4], lambda lib, x: x.norm(p, dim, keepdim), fd=p not in (0,))
    check_op([_distinct((3, 4)) * 4], lambda lib, x: lib.norm(x, p=p, dim=dim, keepdim=keepdim), grad=False)


@needs_torch
def test_norm_of_zero_vector_gradient():
    for p in (2, "fro", 1):
        xs, xt = serve.zeros(3, requires_grad=True), torch.zeros(3, requires_grad=True)
        xs.norm(p).backward()
        xt.norm(p).backward()
        assert_close(xs.grad, xt.grad)


def test_norm_of_ints_raises():
    with pytest.raises(RuntimeError, match=r"Expected a floating point or complex tensor as input\. Got Long"):
        serve.tensor([1, 2]).norm()


@pytest.mark.parametrize("dim", [0, 1, -1, 2])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax(name, dim):
    check_op([(2, 3, 4)], lambda lib, x: getattr(x, name)(dim))
    check_op([(2, 3, 4)], lambda lib, x: getattr(lib, name)(x, dim=dim))
    check_op([(2, 3, 4)], lambda lib, x: getattr(x, name)(dim, dtype=lib.float64))


@needs_torch
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_stability_and_edge_cases(name):
    big = [[1000.0, 1001.0, 999.0], [-1000.0, -1e4, -1001.0], [0.0, float("-inf"), 1.0]]
    assert_close(getattr(serve.tensor(big), name)(1), getattr(torch.tensor(big), name)(1))
    assert_close(
        getattr(serve.tensor(big, dtype=serve.float16), name)(1),
        getattr(torch.tensor(big, dtype=torch.float16), name)(1),
        atol=1e-2,
        rtol=1e-2,
    )
    for shape, dim in (((), 0), ((3,), -1), ((1, 3), 0)):
        xs, xt = serve.ones(shape), torch.ones(shape)
        assert_close(getattr(xs, name)(dim), getattr(xt, name)(dim))


@needs_torch
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_of_empty(name):
    assert_close(getattr(serve.ones(0, 3), name)(1), getattr(torch.ones(0, 3), name)(1))


@needs_torch
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_over_empty_dim(name):
    assert_close(getattr(serve.ones(0, 3), name)(0), getattr(torch.ones(0, 3), name)(0))
    assert_close(
        getattr(serve.tensor([1, 2, 3]), name)(0, dtype=serve.float32),
        getattr(torch.tensor([1, 2, 3]), name)(0, dtype=torch.float32),
    )


@pytest.mark.parametrize("name", ["all", "any"])
@pytest.mark.parametrize("dtype", ["bool", "float32", "int64", "uint8"])
def test_all_any(name, dtype):
    for dim in (None, 0, 1, -1):
        check_op(
            [(3, 4)],
            lambda lib, x, dim=dim: getattr(x, name)() if dim is None else getattr(x, name)(dim),
            dtype=dtype,
            low=0,
            high=1,
        )
        check_op(
            [(3, 4)],
            lambda lib, x, dim=dim: getattr(lib, name)(x, dim=dim if dim is not None else 0, keepdim=True),
            dtype=dtype,
            low=0,
            high=1,
        )
    check_op([(0, 3)], lambda lib, x: getattr(x, name)(), dtype=dtype)
    check_op([(0, 3)], lambda lib, x: getattr(x, name)(0), dtype=dtype)
    check_op([()], lambda lib, x: getattr(x, name)(), dtype=dtype)


@needs_torch
def test_all_any_uint8_keeps_dtype_like_torch():
    x = [[0, 2], [1, 1]]
    for name in ("all", "any"):
        assert_close(
            getattr(serve.tensor(x, dtype=serve.uint8), name)(1), getattr(torch.tensor(x, dtype=torch.uint8), name)(1)
        )


def test_count_nonzero():
    check_op([(3, 4)], lambda lib, x: lib.count_nonzero(x), dtype="int64", low=0, high=2)
    check_op([(3, 4)], lambda lib, x: lib.count_nonzero(x, dim=1), dtype="int64", low=0, high=2)


@needs_torch
def test_sum_backward_second_order_and_keepdim_grad_shapes():
    xs = serve.randn(2, 3, requires_grad=True)
    xt = torch.tensor(xs.detach().numpy(), requires_grad=True)
    for lib, x in ((serve, xs), (torch, xt)):
        y = (x.sum(1, keepdim=True) * x).pow(2).mean()
        (g,) = lib.autograd.grad(y, x, create_graph=True)
        g.sum().backward()
    assert_close(xs.grad, xt.grad)
