"""sort, argsort, topk (and kthvalue, msort) against PyTorch, with gradients through the values."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from tests.helpers import assert_close, check_op, needs_torch, torch


def _distinct(shape, seed=0):
    """Distinct values, so that the order (and so the indices) is unambiguous."""
    n = int(np.prod(shape))
    return (np.random.default_rng(seed).permutation(n).astype(np.float32) / max(n, 1) - 0.5).reshape(shape)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1, 2])
def test_sort(dim, descending):
    check_op([_distinct((3, 4, 5))], lambda lib, x: tuple(x.sort(dim, descending)))
    check_op([_distinct((3, 4, 5))], lambda lib, x: tuple(lib.sort(x, dim=dim, descending=descending)))
    check_op([_distinct((3, 4, 5))], lambda lib, x: lib.argsort(x, dim=dim, descending=descending))
    check_op([_distinct((3, 4, 5))], lambda lib, x: x.argsort(dim, descending))


def test_sort_default_dim_and_namedtuple():
    out = serve.tensor([[3.0, 1.0, 2.0]]).sort()
    values, indices = out
    assert out.values is values and out.indices is indices
    assert values.tolist() == [[1.0, 2.0, 3.0]] and indices.tolist() == [[1, 2, 0]]
    assert indices.dtype is serve.int64


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "float16", "bfloat16", "float64"])
def test_sort_dtypes(dtype):
    n = 40 if dtype != "uint8" else 30
    vals = np.random.default_rng(0).permutation(n).reshape(2, n // 2)
    arr = vals.astype(dtype if dtype != "bfloat16" else "float32")
    check_op([arr], lambda lib, x: tuple(x.sort(1, descending=True)), dtype=dtype, grad=False)
    check_op([arr], lambda lib, x: tuple(x.topk(3, 1)), dtype=dtype, grad=False)


def test_sort_zero_dim_and_empty():
    check_op([()], lambda lib, x: tuple(x.sort()))
    check_op([()], lambda lib, x: tuple(x.sort(0, descending=True)))
    check_op([(0, 3)], lambda lib, x: tuple(x.sort(0)))
    check_op([(0, 3)], lambda lib, x: tuple(x.sort(1)))


@needs_torch
def test_sort_stable_ties_and_nan():
    x = [[2.0, 1.0, 2.0, float("nan"), 1.0, float("-inf"), float("inf")]]
    for kw in ({}, {"descending": True}, {"stable": True}, {"stable": True, "descending": True}):
        ours, theirs = serve.tensor(x).sort(**kw), torch.tensor(x).sort(**kw)
        assert_close(ours.values, theirs.values)
        if kw.get("stable"):
            assert_close(ours.indices, theirs.indices)
    bools = [True, False, True, False]
    assert_close(serve.tensor(bools).sort(stable=True).indices, torch.tensor(bools).sort(stable=True).indices)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [0, 1, 3, 5])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_topk(k, dim, largest):
    shape = (5, 5, 5)
    check_op([_distinct(shape)], lambda lib, x: tuple(x.topk(k, dim, largest)))
    check_op([_distinct(shape)], lambda lib, x: tuple(lib.topk(x, k, dim=dim, largest=largest, sorted=True)))


@pytest.mark.parametrize("largest", [True, False])
def test_topk_large_dim_uses_partition_path(largest):
    # k much smaller than the dim, where the backend may partition instead of sorting
    check_op([_distinct((3, 200))], lambda lib, x: tuple(x.topk(7, largest=largest)))
    check_op([_distinct((200, 3))], lambda lib, x: tuple(x.topk(2, 0, largest=largest)))


@needs_torch
def test_topk_with_nan_and_ties():
    x = [[1.0, float("nan"), 3.0, 3.0, -1.0, float("inf")]]
    for largest in (True, False):
        for k in (1, 2, 4):
            ours = serve.tensor(x).topk(k, largest=largest)
            theirs = torch.tensor(x).topk(k, largest=largest)
            assert_close(ours.values, theirs.values)


def test_topk_errors():
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        serve.zeros(2, 3).topk(4)
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        serve.zeros(2, 3).topk(3, 0)
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        serve.zeros(3).topk(-1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        serve.zeros(2, 3).topk(1, 2)
    with pytest.raises(IndexError, match="Dimension out of range"):
        serve.zeros(2, 3).sort(-3)


@needs_torch
def test_topk_zero_dim():
    for lib in (serve, torch):
        v, i = lib.tensor(5.0).topk(1)
        assert v.item() == 5.0 and i.item() == 0 and i.dtype == lib.int64
        v, i = lib.tensor(5.0).topk(0)
        assert tuple(v.shape) == ()
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        serve.tensor(5.0).topk(2)


@needs_torch
def test_kthvalue_and_msort():
    check_op([_distinct((4, 5))], lambda lib, x: tuple(x.kthvalue(2)))
    check_op([_distinct((4, 5))], lambda lib, x: tuple(lib.kthvalue(x, 3, 0, keepdim=True)))
    check_op([_distinct((4, 5))], lambda lib, x: lib.msort(x))


@needs_torch
def test_sort_gradient_with_ties_goes_to_the_selected_element():
    x = [3.0, 1.0, 3.0, 2.0]
    for f in (lambda t: t.sort(descending=True).values[:1], lambda t: t.topk(2).values, lambda t: t.sort().values * 2):
        xs, xt = serve.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        f(xs).sum().backward()
        f(xt).sum().backward()
        assert_close(xs.grad.sum(), xt.grad.sum())
