"""Random numbers: seeding, ranges, distributions, shapes and dtypes, Generator objects."""

from __future__ import annotations

import numpy as np
import pytest

import serve


def test_manual_seed_reproducible():
    for fn in (lambda: serve.rand(5), lambda: serve.randn(2, 3), lambda: serve.randint(0, 10, (6,)),
               lambda: serve.randperm(8), lambda: serve.normal(2.0, 3.0, (4,))):  # fmt: skip
        serve.manual_seed(123)
        a = fn()
        serve.manual_seed(123)
        b = fn()
        assert a.tolist() == b.tolist()
        c = fn()
        assert a.tolist() != c.tolist()  # the stream moved on
    serve.manual_seed(1)
    a = serve.rand(4)
    serve.manual_seed(2)
    assert serve.rand(4).tolist() != a.tolist()
    assert serve.manual_seed(7).initial_seed() == 7 and serve.initial_seed() == 7


def test_rand_range_and_dtype():
    x = serve.rand(10000)
    assert x.dtype == serve.float32 and x.shape == (10000,)
    v = x.numpy()
    assert v.min() >= 0.0 and v.max() < 1.0 and abs(v.mean() - 0.5) < 0.02
    assert serve.rand(2, 3, dtype=serve.float64).dtype == serve.float64
    assert serve.rand((2, 3)).shape == (2, 3)
    assert serve.rand(2, dtype=serve.float16).dtype == serve.float16
    assert serve.rand(2, dtype=serve.bfloat16).dtype == serve.bfloat16
    assert serve.rand(()).shape == ()
    assert serve.rand(0, 3).shape == (0, 3)
    with pytest.raises(RuntimeError):
        serve.rand(3, dtype=serve.int64)


def test_randn_moments():
    v = serve.randn(10000).numpy()
    assert abs(v.mean()) < 0.05 and abs(v.std() - 1.0) < 0.05
    assert serve.randn(3, 4, dtype=serve.float64).dtype == serve.float64
    r = serve.randn(2, requires_grad=True)
    assert r.requires_grad and r.is_leaf


def test_randint_signatures_and_bounds():
    a = serve.randint(5, (1000,))
    assert a.dtype == serve.int64 and a.shape == (1000,)
    assert a.min().item() >= 0 and a.max().item() <= 4 and set(a.tolist()) == {0, 1, 2, 3, 4}
    b = serve.randint(-3, 3, (2, 500))
    assert b.shape == (2, 500) and b.min().item() == -3 and b.max().item() == 2
    c = serve.randint(0, 2, size=(3,), dtype=serve.int32)
    assert c.dtype == serve.int32
    d = serve.randint(10, size=(4,))
    assert d.shape == (4,)
    f = serve.randint(0, 4, (3,), dtype=serve.float32)
    assert f.dtype == serve.float32
    with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to', but got from=3 >= to=3"):
        serve.randint(3, 3, (2,))


def test_randperm():
    p = serve.randperm(50)
    assert p.dtype == serve.int64 and sorted(p.tolist()) == list(range(50))
    assert serve.randperm(0).shape == (0,)
    assert serve.randperm(5, dtype=serve.int32).dtype == serve.int32


def test_normal_forms():
    x = serve.normal(5.0, 0.5, (20000,))
    v = x.numpy()
    assert x.dtype == serve.float32 and abs(v.mean() - 5.0) < 0.03 and abs(v.std() - 0.5) < 0.03
    mean = serve.tensor([0.0, 100.0, -100.0])
    y = serve.normal(mean, 0.001)
    assert y.shape == (3,) and np.allclose(y.numpy(), mean.numpy(), atol=0.1)
    z = serve.normal(mean, serve.tensor([0.001, 0.001, 0.001]))
    assert np.allclose(z.numpy(), mean.numpy(), atol=0.1)
    w = serve.normal(2.0, serve.full((4, 2), 0.0001))
    assert w.shape == (4, 2) and np.allclose(w.numpy(), 2.0, atol=0.01)
    with pytest.raises(RuntimeError, match=r"normal expects std >= 0\.0"):
        serve.normal(0.0, -1.0, (2,))


def test_like_and_inplace_fills():
    base = serve.zeros(3, 4, dtype=serve.float64)
    assert serve.rand_like(base).dtype == serve.float64 and serve.rand_like(base).shape == (3, 4)
    assert serve.randn_like(base).shape == (3, 4)
    r = serve.randint_like(base, 3, 6)
    assert r.dtype == serve.float64 and r.min().item() >= 3 and r.max().item() <= 5
    u = serve.empty(1000).uniform_(-2, 3)
    assert u.min().item() >= -2 and u.max().item() < 3
    n = serve.empty(1000).normal_(10, 0.1)
    assert abs(n.mean().item() - 10) < 0.05
    b = serve.empty(1000).bernoulli_(0.3)
    assert set(b.tolist()) <= {0.0, 1.0} and 0.2 < b.mean().item() < 0.4
    p = serve.bernoulli(serve.tensor([0.0, 1.0, 1.0]))
    assert p.tolist() == [0.0, 1.0, 1.0]
    w = serve.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        w.uniform_()
    with serve.no_grad():
        w.normal_()
    assert w.requires_grad


def test_generator_objects():
    g1 = serve.Generator().manual_seed(42)
    g2 = serve.Generator().manual_seed(42)
    assert serve.rand(5, generator=g1).tolist() == serve.rand(5, generator=g2).tolist()
    assert serve.randn(3, generator=g1).tolist() == serve.randn(3, generator=g2).tolist()
    assert serve.randint(0, 100, (4,), generator=g1).tolist() == serve.randint(0, 100, (4,), generator=g2).tolist()
    assert serve.randperm(6, generator=g1).tolist() == serve.randperm(6, generator=g2).tolist()
    assert g1.initial_seed() == 42
    # a private generator does not move the default stream
    serve.manual_seed(0)
    a = serve.rand(3)
    serve.manual_seed(0)
    serve.rand(3, generator=serve.Generator().manual_seed(5))
    assert serve.rand(3).tolist() == a.tolist()
    assert isinstance(serve.Generator().seed(), int)
    assert serve.Generator(device="cpu").device == serve.device("cpu")
