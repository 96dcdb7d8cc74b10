"""Indexing against PyTorch: basic and advanced reads, assignment (with autograd), gather, masks, where, nonzero."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from tests.helpers import assert_close, check_op, needs_torch, torch


# ---- reads ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fn",
    [
        lambda lib, x: x[1],
        lambda lib, x: x[-1],
        lambda lib, x: x[0, 2],
        lambda lib, x: x[-2, -1, -3],
        lambda lib, x: x[1:],
        lambda lib, x: x[:, ::2],
        lambda lib, x: x[::2, 1:3, ::3],
        lambda lib, x: x[..., 1],
        lambda lib, x: x[0, ..., ::2],
        lambda lib, x: x[None],
        lambda lib, x: x[:, None, 1],
        lambda lib, x: x[..., None],
        lambda lib, x: x[5:],
        lambda lib, x: x[1:1],
        lambda lib, x: x[-10:10],
        lambda lib, x: x[lib.tensor(1)],
        lambda lib, x: x[lib.tensor([1, 0, 1])],
        lambda lib, x: x[[0, 1, 0]],
        lambda lib, x: x[:, [2, 0]],
        lambda lib, x: x[lib.tensor([[0, 1], [1, 1]])],
        lambda lib, x: x[lib.tensor([0, 1]), lib.tensor([2, 1])],
        lambda lib, x: x[lib.tensor([0, 1]), :, lib.tensor([3, 1])],
        lambda lib, x: x[:, lib.tensor([0, 2]), 1:3],
        lambda lib, x: x[1, [0, 2], ::2],
        lambda lib, x: x[..., lib.tensor([-1, 0])],
        lambda lib, x: x[x > 0],
        lambda lib, x: x[x[:, 0, 0] > 0],
        lambda lib, x: x[lib.tensor([True, False])],
        lambda lib, x: x[[True, True]],
        lambda lib, x: x[:, x[0, :, 0] > 0],
        lambda lib, x: x[lib.tensor([1, 1, 0], dtype=lib.int32)],
        lambda lib, x: x[lib.tensor([0, 1], dtype=lib.uint8).bool()],
    ],
)
def test_getitem(fn):
    check_op([(2, 3, 4)], fn)


def test_getitem_0d_and_1d():
    check_op([()], lambda lib, x: x[None])
    check_op([()], lambda lib, x: x[...])
    check_op([(5,)], lambda lib, x: x[lib.tensor([4, 4, 0])])  # repeated indices accumulate gradients
    check_op([(5,)], lambda lib, x: x[[]], grad=False)


def test_basic_index_is_a_view():
    x = serve.zeros(3, 4)
    row = x[1]
    row[2] = 5.0
    assert x[1, 2].item() == 5.0
    x[:, ::2][0] = 1.0
    assert x[0].tolist() == [1.0, 0.0, 1.0, 0.0]
    y = x[[0, 1]]  # advanced indexing copies
    y[0] = 9.0
    assert x[0, 1].item() == 0.0


def test_index_errors():
    x = serve.zeros(2, 3)
    with pytest.raises(IndexError, match="index 2 is out of bounds for dimension 0 with size 2"):
        x[2]
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 1 with size 3"):
        x[0, 3]
    with pytest.raises(IndexError, match="index -3 is out of bounds"):
        x[-3]
    with pytest.raises(IndexError, match="out of bounds"):
        x[serve.tensor([0, 5])]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool tensors"):
        x[serve.tensor([0.0])]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        x[::-1]
    with pytest.raises(IndexError):
        x["a"]
    with pytest.raises(IndexError, match="out of bounds"):
        serve.zeros(2, 3, requires_grad=True)[4]
    with pytest.raises(IndexError):
        x[serve.tensor([True, False, True])]  # mask shape doesn't match


# ---- assignment ----------------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize(
    "index",
    [
        0, -1, (1, 2), slice(1, None), (slice(None), 1), (Ellipsis, 0), ([0, 1], [2, 0]), ([1, 1],),
        (slice(None), [0, 2]), "mask",
    ],
)  # fmt: skip
@pytest.mark.parametrize("value", ["scalar", "tensor", "row"])
def test_setitem(index, value):
    base = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    results = []
    for lib in (serve, torch):
        x = lib.tensor(base)
        idx = x > 0 if index == "mask" else index
        if value == "scalar":
            v = 7.5
        else:
            shape = tuple(x[idx].shape) if value == "tensor" else tuple(x[idx].shape[-1:])
            v = lib.arange(float(np.prod(shape))).reshape(shape) + 100
        x[idx] = v
        results.append(x)
    assert_close(*results)


def test_setitem_dtype_cast_and_broadcast():
    x = serve.zeros(2, 3, dtype=serve.int64)
    x[0] = serve.tensor([1.7, 2.2, 3.9])
    x[1] = 4.6
    assert x.tolist() == [[1, 2, 3], [4, 4, 4]]
    y = serve.zeros(2, 3)
    y[:] = serve.tensor([1.0, 2.0, 3.0])
    assert y.tolist() == [[1.0, 2.0, 3.0]] * 2
    with pytest.raises(RuntimeError, match="shape mismatch"):
        y[0] = serve.tensor([1.0, 2.0])


@needs_torch
@pytest.mark.parametrize("index", [0, (slice(None), 1), [0, 0], "mask"])
def test_setitem_autograd(index):
    grads = []
    for lib in (serve, torch):
        x = lib.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3) - 2, requires_grad=True)
        v = lib.tensor(3.0, requires_grad=True)
        y = x.clone() * 2
        idx = y.detach() > 0 if index == "mask" else index
        y[idx] = v * v
        (y * lib.arange(1.0, 7.0).view(2, 3)).sum().backward()
        grads.append((y, x.grad, v.grad))
    for ours, ref in zip(*grads):
        assert_close(ours, ref)


def test_setitem_zeroes_gradient_row():
    x = serve.ones(2, 3, requires_grad=True)
    y = x.clone()
    y[0] = 5
    assert y.grad_fn is not None and not y.is_leaf
    y.sum().backward()
    assert x.grad.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]


def test_setitem_leaf_requires_grad_raises():
    x = serve.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation"):
        x[0] = 2.0
    with serve.no_grad():
        x[0] = 2.0
    assert x.tolist() == [2.0, 1.0] and x.requires_grad


def test_setitem_on_view_updates_base_with_grad():
    x = serve.zeros(2, 3, requires_grad=True)
    with serve.no_grad():
        x[1, 1:] = 4.0
    assert x.tolist() == [[0.0, 0.0, 0.0], [0.0, 4.0, 4.0]]


# ---- gather / masks / where / nonzero --------------------------------------------------------------------
@pytest.mark.parametrize(
    "fn",
    [
        lambda lib, x: x.gather(1, lib.tensor([[0, 0], [1, 0], [3, 2]])),
        lambda lib, x: lib.gather(x, 0, lib.tensor([[2, 1, 0, 0]])),
        lambda lib, x: x.gather(-1, lib.tensor([[3], [2], [1]])),
        lambda lib, x: x.gather(1, lib.tensor([[0, 0, 0, 0, 0]] * 3)),  # repeated indices accumulate
    ],
)
def test_gather(fn):
    check_op([(3, 4)], fn)


def test_gather_errors():
    x = serve.zeros(3, 4)
    with pytest.raises(RuntimeError, match="Expected dtype int64 for index"):
        x.gather(1, serve.tensor([[0]], dtype=serve.int32))
    with pytest.raises(RuntimeError, match="Index tensor must have the same number of dimensions"):
        x.gather(1, serve.tensor([0]))
    with pytest.raises(RuntimeError, match="index 4 is out of bounds for dimension 1 with size 4"):
        x.gather(1, serve.tensor([[4]]))
    with pytest.raises(RuntimeError, match="index -1 is out of bounds for dimension 1 with size 4"):
        x.gather(1, serve.tensor([[0], [-1]]))
    with pytest.raises(
        RuntimeError,
        match=r"Size does not match at dimension 0 expected index \[4, 1\] to be smaller than self \[3, 4\]",
    ):
        x.gather(1, serve.zeros(4, 1, dtype=serve.int64))


@pytest.mark.parametrize(
    "fn",
    [
        lambda lib, x: x.masked_select(x > 0),
        lambda lib, x: lib.masked_select(x, lib.tensor([True, False, True, True])),
        lambda lib, x: x.masked_fill(x > 0, 0.5),
        lambda lib, x: x.masked_fill(lib.tensor([[True], [False], [True]]), -1),
        lambda lib, x: lib.masked_fill(x, x < 0, lib.tensor(2.0)),
        lambda lib, x: lib.where(x > 0, x, 0.0),
        lambda lib, x: lib.where(x > 0, 1.0, x),
        lambda lib, x: lib.where(x > 0, x, x * 2),
        lambda lib, x: x.where(x < 1, lib.zeros(4)),
    ],
)
def test_masks_and_where(fn):
    check_op([(3, 4)], fn)


@needs_torch
def test_where_scalars_dtype():
    for a, b in [(1.0, 0.0), (1, 0), (True, False), (1, 2.5)]:
        cond = [True, False, True]
        assert_close(serve.where(serve.tensor(cond), a, b), torch.where(torch.tensor(cond), a, b))
    assert_close(
        serve.where(serve.tensor([True, False]), serve.tensor([1, 2]), 0.5),
        torch.where(torch.tensor([True, False]), torch.tensor([1, 2]), 0.5),
    )


def test_mask_errors():
    x = serve.zeros(3, 4)
    with pytest.raises(RuntimeError, match="only supports boolean masks, but got mask with dtype int64"):
        x.masked_fill(serve.ones(3, 4, dtype=serve.int64), 1.0)
    with pytest.raises(RuntimeError, match="only supports boolean masks"):
        x.masked_select(serve.ones(3, 4, dtype=serve.uint8))
    with pytest.raises(RuntimeError, match="0-dimensional value tensor"):
        x.masked_fill(x > 0, serve.tensor([1.0]))


@needs_torch
@pytest.mark.parametrize("as_tuple", [False, True])
@pytest.mark.parametrize(
    "data", [[[0, 1, 2], [3, 0, 0]], [0.0, 1.5, 0.0, -2.0], [[False, True], [True, True]], [0, 0], 5, 0, []]
)
def test_nonzero(data, as_tuple):
    ours = serve.tensor(data).nonzero(as_tuple=as_tuple)
    ref = torch.tensor(data).nonzero(as_tuple=as_tuple)
    if as_tuple:
        assert len(ours) == len(ref)
        for o, r in zip(ours, ref):
            assert_close(o, r)
    else:
        assert_close(ours, ref)
    assert_close(serve.argwhere(serve.tensor(data)), torch.argwhere(torch.tensor(data)))


def test_take():
    check_op([(3, 4)], lambda lib, x: x.take(lib.tensor([[0, 11], [5, 5]])))
