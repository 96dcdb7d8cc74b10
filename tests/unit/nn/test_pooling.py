"""Pooling against PyTorch: max / average / adaptive pooling in 1-d and 2-d, their indices, gradients and modules."""

from __future__ import annotations

import numpy as np
import pytest

import serve
import serve.nn.functional as F
from serve import nn
from tests.helpers import assert_close, check_op, needs_torch, torch

TOL = {"rtol": 1e-5, "atol": 1e-6}

MAX2D = [  # input, kwargs
    ((2, 3, 8, 8), {"kernel_size": 2}),
    ((2, 3, 9, 7), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((2, 3, 9, 7), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    ((2, 3, 9, 8), {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 1), "dilation": (2, 1)}),
    ((2, 3, 10, 10), {"kernel_size": 3, "stride": 3, "padding": 1, "ceil_mode": True, "dilation": 2}),
    ((3, 7, 7), {"kernel_size": 3, "stride": 1, "padding": 1}),  # unbatched
]


@pytest.mark.parametrize(("xs", "kw"), MAX2D)
def test_max_pool2d(xs: tuple, kw: dict) -> None:
    check_op([xs], lambda lib, x: lib.nn.functional.max_pool2d(x, **kw), **TOL)
    check_op([xs], lambda lib, x: lib.nn.functional.max_pool2d(x, **kw, return_indices=True), **TOL)


@pytest.mark.parametrize(
    ("xs", "kw"),
    [((2, 3, 9), {"kernel_size": 2}),
     ((2, 3, 9), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
     ((3, 10), {"kernel_size": 2, "dilation": 3})],
)  # fmt: skip
def test_max_pool1d(xs: tuple, kw: dict) -> None:
    check_op([xs], lambda lib, x: lib.nn.functional.max_pool1d(x, **kw, return_indices=True), **TOL)


@needs_torch
def test_max_pool_ties_and_infinities() -> None:
    """The first maximum wins; a window of -inf points at its first tap inside the input; NaN propagates."""
    x = np.zeros((1, 1, 5, 5), np.float32)
    x[0, 0, 3:, :] = -np.inf
    x[0, 0, 0, 4] = np.nan
    for kw in ({"kernel_size": 2, "padding": 1}, {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2}):
        ours = F.max_pool2d(serve.tensor(x), return_indices=True, **kw)
        ref = torch.nn.functional.max_pool2d(torch.tensor(x), return_indices=True, **kw)
        assert_close(ours[0], ref[0])
        assert_close(ours[1], ref[1])


AVG2D = [
    ((2, 3, 8, 8), {"kernel_size": 2}),
    ((2, 3, 9, 7), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((2, 3, 9, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}),
    ((2, 3, 9, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ((2, 3, 10, 7), {"kernel_size": (4, 3), "stride": (3, 2), "padding": (2, 1), "count_include_pad": False}),
    ((2, 3, 10, 7), {"kernel_size": (4, 3), "stride": (3, 2), "padding": (2, 1), "ceil_mode": True}),
    ((2, 3, 9, 7), {"kernel_size": 3, "padding": 1, "divisor_override": 4}),
    ((3, 6, 6), {"kernel_size": 3, "stride": 1}),
]


@pytest.mark.parametrize(("xs", "kw"), AVG2D)
def test_avg_pool2d(xs: tuple, kw: dict) -> None:
    check_op([xs], lambda lib, x: lib.nn.functional.avg_pool2d(x, **kw), **TOL)


@pytest.mark.parametrize(
    ("xs", "kw"),
    [((2, 3, 9), {"kernel_size": 3}),
     ((2, 3, 9), {"kernel_size": 4, "stride": 3, "padding": 2, "ceil_mode": True, "count_include_pad": False}),
     ((3, 9), {"kernel_size": 2, "stride": 1, "padding": 1})],
)  # fmt: skip
def test_avg_pool1d(xs: tuple, kw: dict) -> None:
    check_op([xs], lambda lib, x: lib.nn.functional.avg_pool1d(x, **kw), **TOL)


@needs_torch
def test_avg_pool_second_derivative() -> None:
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 7, 7)).astype(np.float32)
    grads = []
    for lib in (serve, torch):
        t = lib.tensor(x, requires_grad=True)
        y = lib.nn.functional.avg_pool2d(t, 3, 2, 1, count_include_pad=False)
        (g,) = lib.autograd.grad((y**3).sum(), t, create_graph=True)
        (g * g).sum().backward()
        grads.append(t.grad)
    assert_close(*grads, **TOL)


@pytest.mark.parametrize("out", [1, (1, 1), 3, (2, 4), (3, None), (5, 7), (4, 2), 0])
def test_adaptive_avg_pool2d(out: object) -> None:
    # torch has no backward for an empty output
    check_op([(2, 3, 8, 6)], lambda lib, x: lib.nn.functional.adaptive_avg_pool2d(x, out), grad=out != 0, **TOL)


@pytest.mark.parametrize("out", [1, 3, (2, None), (5, 7), (4, 2)])
def test_adaptive_max_pool2d(out: object) -> None:
    check_op([(2, 3, 8, 6)], lambda lib, x: lib.nn.functional.adaptive_max_pool2d(x, out, return_indices=True), **TOL)


@pytest.mark.parametrize("out", [1, 3, 4, 7])
def test_adaptive_pool1d(out: int) -> None:
    check_op([(2, 3, 9)], lambda lib, x: lib.nn.functional.adaptive_avg_pool1d(x, out), **TOL)
    check_op([(3, 9)], lambda lib, x: lib.nn.functional.adaptive_max_pool1d(x, out, return_indices=True), **TOL)


@needs_torch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_other_dtypes(dtype: str) -> None:
    check_op([(2, 3, 7, 7)], lambda lib, x: lib.nn.functional.max_pool2d(x, 3, 2, 1), dtype=dtype, grad=False)
    tol = {"float16": 2e-3, "bfloat16": 2e-2, "float64": 1e-12}[dtype]
    check_op([(2, 3, 7, 7)], lambda lib, x: lib.nn.functional.avg_pool2d(x, 3, 2, 1), dtype=dtype, grad=False,
             rtol=tol, atol=tol)  # fmt: skip


@needs_torch
def test_integer_pooling() -> None:
    x = np.random.default_rng(0).integers(-50, 50, (2, 3, 7, 7))
    assert_close(F.max_pool2d(serve.tensor(x), 2), torch.nn.functional.max_pool2d(torch.tensor(x), 2))
    assert_close(F.avg_pool2d(serve.tensor(x), 3, 2, 1), torch.nn.functional.avg_pool2d(torch.tensor(x), 3, 2, 1))


X = serve.zeros(2, 3, 8, 8)


@pytest.mark.parametrize(
    ("call", "match"),
    [(lambda: F.max_pool2d(X, 3, padding=2), "pad should be smaller than or equal to half of kernel size"),
     (lambda: F.max_pool2d(X, 2, stride=0), "stride should not be zero"),
     (lambda: F.max_pool2d(X, 20), r"Given input size: \(3x8x8\). Calculated output size: \(3x0x0\)"),
     (lambda: F.max_pool2d(X[0, 0], 2), r"Expected 3D or 4D \(batch mode\) tensor"),
     (lambda: F.max_pool2d(X, 2, dilation=0), "dilation should be greater than zero"),
     (lambda: F.max_pool2d(X, 2, padding=-1), "pad must be non-negative"),
     (lambda: F.max_pool2d(X, (2, 2, 2)), "kernel_size must either be a single int, or a tuple of 2 ints"),
     (lambda: F.max_pool1d(X, 2), "max_pool1d"),
     (lambda: F.avg_pool2d(X, 2, divisor_override=0), "divisor must be not zero"),
     (lambda: F.avg_pool1d(X, 2), "avg_pool1d"),
     (lambda: F.adaptive_avg_pool2d(X, (2, 2, 2)), "output_size must be 2"),
     (lambda: F.adaptive_avg_pool2d(X, -1), "greater than or equal to 0"),
     (lambda: F.adaptive_max_pool2d(X[:, :, :0], 2), "non-zero size for non-batch dimensions"),
     (lambda: F.adaptive_avg_pool2d(X[0, 0], 2), r"Expected 3D or 4D tensor")],
)  # fmt: skip
def test_errors(call: object, match: str) -> None:
    with pytest.raises(RuntimeError, match=match):
        call()  # type: ignore[operator]


MODULES = [
    ("MaxPool1d", (3,), {"stride": 2, "padding": 1}, (2, 3, 9)),
    ("MaxPool2d", (3, 2, 1), {"ceil_mode": True, "dilation": 1}, (2, 3, 9, 8)),
    ("AvgPool1d", (3,), {"count_include_pad": False, "padding": 1}, (2, 3, 9)),
    ("AvgPool2d", (3,), {"stride": 2, "padding": 1, "divisor_override": 5}, (2, 3, 9, 8)),
    ("AdaptiveAvgPool1d", (4,), {}, (2, 3, 9)),
    ("AdaptiveAvgPool2d", ((None, 3),), {}, (2, 3, 9, 8)),
    ("AdaptiveMaxPool1d", (4,), {}, (2, 3, 9)),
    ("AdaptiveMaxPool2d", (3,), {}, (2, 3, 9, 8)),
]


@needs_torch
@pytest.mark.parametrize(("name", "args", "kw", "xs"), MODULES)
def test_modules_match_torch(name: str, args: tuple, kw: dict, xs: tuple) -> None:
    ref, ours = getattr(torch.nn, name)(*args, **kw), getattr(nn, name)(*args, **kw)
    assert repr(ours) == repr(ref)
    assert list(ours.state_dict()) == []
    x = np.random.default_rng(0).uniform(-1, 1, xs).astype(np.float32)
    assert_close(ours(serve.tensor(x)), ref(torch.tensor(x)), **TOL)


@needs_torch
def test_return_indices_modules() -> None:
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 8, 8)).astype(np.float32)
    for name, args in (("MaxPool2d", (2,)), ("AdaptiveMaxPool2d", (3,))):
        ours = getattr(nn, name)(*args, return_indices=True)(serve.tensor(x))
        ref = getattr(torch.nn, name)(*args, return_indices=True)(torch.tensor(x))
        assert_close(ours[0], ref[0])
        assert_close(ours[1], ref[1])


@needs_torch
@pytest.mark.parametrize(
    "call",
    [lambda lib, x: lib.nn.functional.conv2d(x, lib.ones(4, 3, 3, 3)),
     lambda lib, x: lib.nn.functional.conv2d(x, lib.ones(6, 1, 3, 3), groups=3, padding=1),
     lambda lib, x: lib.nn.functional.conv_transpose2d(x, lib.ones(3, 2, 3, 3), stride=2),
     lambda lib, x: lib.nn.functional.max_pool2d(x, 2, return_indices=True)[0],
     lambda lib, x: lib.nn.functional.avg_pool2d(x, 3, 2, 1),
     lambda lib, x: lib.nn.functional.adaptive_max_pool2d(x, 3),
     lambda lib, x: lib.nn.functional.interpolate(x, scale_factor=2, mode="bilinear"),
     lambda lib, x: lib.nn.functional.pad(x, (1, 2, 2, 1), mode="reflect"),
     lambda lib, x: lib.nn.functional.unfold(x, 2)],
)  # fmt: skip
def test_empty_batch(call: object) -> None:
    ours = call(serve, serve.zeros(0, 3, 8, 8, requires_grad=True))  # type: ignore[operator]
    assert tuple(ours.shape) == tuple(call(torch, torch.zeros(0, 3, 8, 8)).shape)  # type: ignore[operator]
    ours.sum().backward()


@pytest.mark.parametrize("batch", [1, 3])
def test_max_pool2d_of_a_channels_last_view(batch: int) -> None:
    # a permuted input's planes reshape to a column-major view; the pool once read them as row-major
    a = np.random.default_rng(0).standard_normal((batch, 28, 28, 6)).astype(np.float32)
    view = serve.from_numpy(a).permute(0, 3, 1, 2)
    dense = serve.from_numpy(np.ascontiguousarray(a.transpose(0, 3, 1, 2)))
    for kw in ({"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1}):
        assert_close(F.max_pool2d(view, **kw), F.max_pool2d(dense, **kw), atol=0, rtol=0)
