"""diff, meshgrid (forward and gradient vs torch and finite differences) and multinomial (law, seeding, errors)."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from tests.helpers import assert_close, check_op, needs_torch, torch


@pytest.mark.parametrize(
    ("shape", "kwargs"),
    [((7,), {}), ((3, 6), {"dim": 0}), ((3, 6), {"n": 2}), ((2, 3, 5), {"n": 3, "dim": 1}), ((4,), {"n": 5}),
     ((3, 4), {"n": 0})],
)  # fmt: skip
def test_diff(shape, kwargs):
    check_op([shape], lambda lib, x: lib.diff(x, **kwargs))


def test_diff_prepend_append_and_method():
    check_op([(3, 5), (3, 2), (3, 1)], lambda lib, x, p, a: lib.diff(x, n=2, dim=1, prepend=p, append=a))
    check_op([(4, 3), (1, 3)], lambda lib, x, a: x.diff(dim=0, append=a))


@needs_torch
@pytest.mark.parametrize("dtype", ["bool", "int64"])
def test_diff_of_bools_and_integers(dtype):
    values = np.array([[1, 0, 0, 1, 1], [0, 3, 3, 2, 5]])
    ours = serve.from_numpy(values.astype(dtype)).diff()
    assert_close(ours, torch.from_numpy(values.astype(dtype)).diff())


def test_diff_errors():
    with pytest.raises(RuntimeError, match="at least one-dimensional"):
        serve.diff(serve.tensor(1.0))
    with pytest.raises(RuntimeError, match="same dimension as input"):
        serve.diff(serve.ones(2, 3), prepend=serve.ones(3))


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(indexing):
    check_op([(3,), (4,), (2,)], lambda lib, a, b, c: lib.meshgrid(a, b, c, indexing=indexing))
    check_op([(3,), (4,)], lambda lib, a, b: lib.meshgrid([a, b], indexing=indexing))
    check_op([(5,)], lambda lib, a: lib.meshgrid(a, indexing=indexing))


@needs_torch
def test_meshgrid_of_0d_tensors_and_errors():
    ours = serve.meshgrid(serve.tensor(2.0), serve.arange(3.0), indexing="ij")
    theirs = torch.meshgrid(torch.tensor(2.0), torch.arange(3.0), indexing="ij")
    for o, t in zip(ours, theirs, strict=True):
        assert_close(o, t)
    with pytest.raises(RuntimeError, match="indexing must be one of"):
        serve.meshgrid(serve.arange(3), indexing="yx")
    with pytest.raises(RuntimeError, match="Expected 0D or 1D"):
        serve.meshgrid(serve.ones(2, 2))
    with pytest.raises(RuntimeError, match="same dtype"):
        serve.meshgrid(serve.arange(2), serve.ones(2))


def test_multinomial_with_replacement_follows_the_weights():
    serve.manual_seed(0)
    weights = serve.tensor([[1.0, 0.0, 3.0, 6.0], [5.0, 5.0, 0.0, 0.0]])
    draws = serve.multinomial(weights, 20000, replacement=True)
    assert draws.dtype == serve.int64 and tuple(draws.shape) == (2, 20000)
    for row, w in zip(draws.numpy(), weights.numpy(), strict=True):
        freq = np.bincount(row, minlength=4) / row.size
        np.testing.assert_allclose(freq, w / w.sum(), atol=0.015)  # ~4 standard errors at n=20000
        assert freq[w == 0].sum() == 0


def test_multinomial_without_replacement_is_distinct_and_weighted():
    serve.manual_seed(1)
    weights = serve.tensor([8.0, 1.0, 1.0, 0.0, 2.0])
    firsts = []
    for _ in range(3000):
        draw = serve.multinomial(weights, 4).numpy()
        assert sorted(draw) == [0, 1, 2, 4]  # distinct, never the zero-weight category
        firsts.append(draw[0])
    freq = np.bincount(firsts, minlength=5) / len(firsts)
    np.testing.assert_allclose(freq, weights.numpy() / 12.0, atol=0.03)  # the first pick has the plain law
    short = serve.multinomial(serve.tensor([0.0, 1.0, 0.0]), 3).tolist()  # torch too: zero weights come last
    assert short[0] == 1 and sorted(short) == [0, 1, 2]
    second = serve.multinomial(serve.tensor([[1.0, 1.0]] * 3), 2)
    assert tuple(second.shape) == (3, 2) and all(sorted(r) == [0, 1] for r in second.numpy())


def test_multinomial_is_reproducible_under_manual_seed():
    weights = serve.rand(3, 10) + 0.1
    serve.manual_seed(7)
    a, b = serve.multinomial(weights, 5), serve.multinomial(weights, 6, True)
    serve.manual_seed(7)
    assert (serve.multinomial(weights, 5) == a).all() and (serve.multinomial(weights, 6, True) == b).all()
    gen = serve.Generator().manual_seed(3)
    c = serve.multinomial(weights, 8, True, generator=gen)
    gen.manual_seed(3)
    assert (c == serve.multinomial(weights, 8, True, generator=gen)).all()
    serve.manual_seed(8)  # another seed, another stream (60 draws from 10 categories: equal by chance ~never)
    assert serve.multinomial(weights, 20, True).tolist() != serve.multinomial(weights, 20, True).tolist()


@needs_torch
@pytest.mark.parametrize(
    ("weights", "n", "replacement"),
    [([1.0, -1.0], 1, True), ([0.0, 0.0], 1, True), ([1.0, 2.0], 3, False),
     ([[[1.0]]], 1, True)],
)  # fmt: skip
def test_multinomial_refuses_what_torch_refuses(weights, n, replacement):
    with pytest.raises(RuntimeError):
        torch.multinomial(torch.tensor(weights), n, replacement)
    with pytest.raises(RuntimeError):
        serve.multinomial(serve.tensor(weights), n, replacement)


@pytest.mark.parametrize(("shape", "dims"), [((2, 3), (2,)), ((2, 3), (2, 1, 3)), ((4,), (1, 2)), ((2, 2), ())])
def test_tile(shape, dims):
    check_op([shape], lambda lib, x: lib.tile(x, dims))
    check_op([shape], lambda lib, x: x.tile(dims))


@pytest.mark.parametrize("name", ["log2", "log10"])
def test_log2_log10(name):
    check_op([(3, 4)], lambda lib, x: getattr(lib, name)(x), low=0.1, high=5.0)
    check_op([(5,)], lambda lib, x: getattr(x, name)(), low=0.1, high=5.0)
