"""Convolutions against PyTorch: F.conv1d/2d, F.conv_transpose1d/2d, F.unfold/fold and the Conv modules."""

from __future__ import annotations

import math

import numpy as np
import pytest

import serve
import serve.nn.functional as F
from serve import nn
from tests.helpers import assert_close, check_op, needs_torch, torch

TOL = {"rtol": 1e-5, "atol": 1e-5}
# torch's own note about padding="same" with even kernels (it pads a copy, as serve always does)
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")

CONV2D = [  # input, weight, kwargs
    ((2, 4, 7, 6), (6, 4, 3, 3), {}),
    ((2, 4, 7, 6), (6, 4, 3, 3), {"stride": 2, "padding": 1}),
    ((2, 4, 7, 6), (6, 2, 3, 2), {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2), "groups": 2}),
    ((2, 4, 9, 8), (4, 1, 3, 3), {"padding": 1, "groups": 4}),  # depthwise
    ((2, 4, 9, 8), (8, 1, 3, 3), {"stride": 2, "padding": 1, "groups": 4, "dilation": 2}),  # depthwise, multiplier 2
    ((2, 4, 9, 8), (8, 1, 3, 2), {"padding": (2, 1), "groups": 4, "dilation": (2, 3)}),
    ((2, 4, 7, 6), (6, 4, 1, 1), {}),  # pointwise
    ((2, 4, 7, 6), (6, 2, 1, 1), {"stride": 2, "groups": 2}),
    ((2, 4, 7, 6), (6, 4, 1, 1), {"stride": 3, "padding": 1}),
    ((2, 4, 7, 6), (5, 4, 4, 3), {"padding": "same"}),  # even kernel: the extra padding goes after
    ((2, 4, 7, 6), (5, 4, 2, 3), {"padding": "same", "dilation": (3, 2)}),
    ((2, 4, 7, 6), (5, 4, 3, 3), {"padding": "valid"}),
    ((4, 7, 6), (5, 4, 3, 3), {"padding": 1}),  # unbatched
    ((3, 3, 9, 9), (4, 3, 5, 5), {"stride": 3, "padding": 2}),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("xs", "ws", "kw"), CONV2D)
def test_conv2d(xs: tuple, ws: tuple, kw: dict, bias: bool) -> None:
    shapes = [xs, ws] + ([(ws[0],)] if bias else [])
    check_op(shapes, lambda lib, x, w, *b: lib.nn.functional.conv2d(x, w, *b, **kw), **TOL)


CONV1D = [
    ((2, 4, 9), (6, 4, 3), {}),
    ((2, 4, 9), (6, 2, 3), {"stride": 2, "padding": 1, "dilation": 2, "groups": 2}),
    ((2, 4, 9), (8, 1, 3), {"padding": "same", "groups": 4}),
    ((2, 4, 9), (5, 4, 4), {"padding": "same"}),
    ((4, 9), (5, 4, 1), {"stride": 2}),
]


@pytest.mark.parametrize(("xs", "ws", "kw"), CONV1D)
def test_conv1d(xs: tuple, ws: tuple, kw: dict) -> None:
    check_op([xs, ws, (ws[0],)], lambda lib, x, w, b: lib.nn.functional.conv1d(x, w, b, **kw), **TOL)


CONV_T2D = [  # input, weight (C_in, C_out / groups, kH, kW), kwargs
    ((2, 4, 5, 4), (4, 3, 3, 3), {}),
    ((2, 4, 5, 4), (4, 3, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
    ((2, 4, 5, 4), (4, 2, 3, 2), {"stride": (2, 3), "padding": (1, 0), "output_padding": (0, 2), "dilation": 2}),
    ((2, 4, 5, 4), (4, 2, 3, 2), {"stride": 2, "padding": (0, 1), "groups": 2, "dilation": (1, 2)}),
    ((2, 4, 5, 4), (4, 1, 3, 3), {"stride": 2, "groups": 4}),  # depthwise
    ((2, 4, 5, 4), (4, 3, 1, 1), {"stride": 2}),
    ((2, 4, 5, 4), (4, 3, 3, 3), {"dilation": 2, "output_padding": 1}),  # output_padding < dilation, stride 1
    ((4, 5, 4), (4, 3, 4, 4), {"stride": 2, "padding": 1}),  # unbatched, the DCGAN shape
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("xs", "ws", "kw"), CONV_T2D)
def test_conv_transpose2d(xs: tuple, ws: tuple, kw: dict, bias: bool) -> None:
    shapes = [xs, ws] + ([(ws[1] * kw.get("groups", 1),)] if bias else [])
    check_op(shapes, lambda lib, x, w, *b: lib.nn.functional.conv_transpose2d(x, w, *b, **kw), **TOL)


@pytest.mark.parametrize(
    ("xs", "ws", "kw"),
    [((2, 4, 6), (4, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
     ((2, 4, 6), (4, 1, 3), {"groups": 2, "dilation": 2}),
     ((4, 6), (4, 2, 5), {})],
)  # fmt: skip
def test_conv_transpose1d(xs: tuple, ws: tuple, kw: dict) -> None:
    out = ws[1] * kw.get("groups", 1)
    check_op([xs, ws, (out,)], lambda lib, x, w, b: lib.nn.functional.conv_transpose1d(x, w, b, **kw), **TOL)


@needs_torch
@pytest.mark.parametrize(
    ("conv", "xs", "ws", "kw"),
    [("conv2d", (2, 4, 7, 6), (6, 2, 3, 3), {"stride": 2, "padding": 1, "groups": 2}),
     ("conv2d", (2, 4, 7, 6), (4, 1, 3, 3), {"padding": 1, "groups": 4}),
     ("conv_transpose2d", (2, 4, 5, 4), (4, 3, 3, 3), {"stride": 2, "output_padding": 1}),
     ("conv_transpose2d", (2, 4, 5, 4), (4, 3, 3, 3), {"dilation": 2, "output_padding": 1})],
)  # fmt: skip
def test_second_derivatives(conv: str, xs: tuple, ws: tuple, kw: dict) -> None:
    """Gradients of gradients: the three conv primitives differentiate each other."""
    rng = np.random.default_rng(0)
    x, w = rng.uniform(-1, 1, xs).astype(np.float32), rng.uniform(-1, 1, ws).astype(np.float32)
    grads = []
    for lib in (serve, torch):
        tx, tw = lib.tensor(x, requires_grad=True), lib.tensor(w, requires_grad=True)
        y = getattr(lib.nn.functional, conv)(tx, tw, **kw)
        gx, gw = lib.autograd.grad((y * y).sum(), (tx, tw), create_graph=True)
        ((gx * gx).sum() + (gw * gw * gw).sum()).backward()
        grads.append((tx.grad, tw.grad))
    for ours, ref in zip(*grads):
        assert_close(ours, ref, rtol=1e-4, atol=1e-4)


@needs_torch
def test_large_planes_and_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """One matmul per sample for large planes, several im2col chunks for a large batch."""
    from serve.backend import cpu_conv

    monkeypatch.setattr(cpu_conv, "_CHUNK_BYTES", 200_000)
    check_op([(5, 3, 36, 34), (4, 3, 3, 3), (4,)], lambda lib, x, w, b: lib.nn.functional.conv2d(x, w, b, padding=1),
             fd=False, **TOL)  # fmt: skip
    check_op([(5, 3, 20, 20), (4, 3, 3, 3)], lambda lib, x, w: lib.nn.functional.conv2d(x, w, stride=2), fd=False,
             **TOL)  # fmt: skip
    check_op([(5, 4, 12, 12), (4, 3, 3, 3)],
             lambda lib, x, w: lib.nn.functional.conv_transpose2d(x, w, stride=2), fd=False, **TOL)  # fmt: skip


@needs_torch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_other_dtypes(dtype: str) -> None:
    tol = {"float64": 1e-10, "float16": 2e-3, "bfloat16": 2e-2}[dtype]
    check_op([(2, 3, 6, 6), (4, 3, 3, 3), (4,)], lambda lib, x, w, b: lib.nn.functional.conv2d(x, w, b, padding=1),
             dtype=dtype, atol=tol * 10, rtol=tol, grad=False)  # fmt: skip
    check_op([(2, 4, 5, 5), (4, 1, 3, 3)], lambda lib, x, w: lib.nn.functional.conv2d(x, w, groups=4),
             dtype=dtype, atol=tol * 10, rtol=tol, grad=False)  # fmt: skip


def test_integer_conv() -> None:
    x = serve.arange(2 * 3 * 5 * 5).reshape(2, 3, 5, 5)
    w = serve.ones(4, 3, 3, 3, dtype=serve.int64)
    out = F.conv2d(x, w)
    assert out.dtype == serve.int64
    assert out[0, 0, 0, 0].item() == sum(c * 25 + h * 5 + v for c in range(3) for h in range(3) for v in range(3))


@pytest.mark.parametrize(
    ("kw", "shapes"),
    [({"kernel_size": 2}, (2, 3, 5, 6)),
     ({"kernel_size": (2, 3), "dilation": (2, 1), "padding": 1, "stride": (2, 1)}, (2, 3, 5, 6)),
     ({"kernel_size": 3, "padding": 1}, (3, 5, 6))],
)  # fmt: skip
def test_unfold_fold(kw: dict, shapes: tuple) -> None:
    check_op([shapes], lambda lib, x: lib.nn.functional.unfold(x, **kw), **TOL)
    cols = F.unfold(serve.zeros(*shapes), **kw)
    size = shapes[-2:]
    check_op([tuple(cols.shape)], lambda lib, c: lib.nn.functional.fold(c, size, **kw), **TOL)


# ---- errors ------------------------------------------------------------------------------------------
X, W = serve.zeros(2, 3, 8, 8), serve.zeros(4, 3, 3, 3)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [(lambda: F.conv2d(X, W, padding="same", stride=2), RuntimeError, "not supported for strided"),
     (lambda: F.conv2d(X, W, padding="full"), RuntimeError, "Invalid padding string: 'full'"),
     (lambda: F.conv2d(X, serve.zeros(4, 2, 3, 3)), RuntimeError,
      r"weight of size \[4, 2, 3, 3\], expected input\[2, 3, 8, 8\] to have 2 channels, but got 3"),
     (lambda: F.conv2d(X, W, groups=3), RuntimeError, "divisible by 3 at dimension 0"),
     (lambda: F.conv2d(X[0, 0], W), RuntimeError, r"Expected 3D \(unbatched\) or 4D \(batched\) input to conv2d"),
     (lambda: F.conv1d(X, W), RuntimeError, "input to conv1d"),
     (lambda: F.conv2d(X, serve.zeros(4, 3, 9, 9)), RuntimeError, "Kernel size can't be greater"),
     (lambda: F.conv2d(X, W, stride=0), RuntimeError, "non-positive stride"),
     (lambda: F.conv2d(X, W, padding=-1), RuntimeError, "negative padding"),
     (lambda: F.conv2d(X, W, dilation=0), RuntimeError, "non-positive dilation"),
     (lambda: F.conv2d(X, W, groups=0), RuntimeError, "non-positive groups"),
     (lambda: F.conv2d(X, W, stride=(1, 2, 3)), RuntimeError, "a list of 2 values"),
     (lambda: F.conv2d(X, W, serve.zeros(3)), RuntimeError, "expected bias to be 1-dimensional with 4 elements"),
     (lambda: F.conv2d(X.double(), W), RuntimeError, "expected scalar type"),
     (lambda: F.conv2d(X, W, serve.zeros(4).double()), RuntimeError, "bias type"),
     (lambda: F.conv_transpose2d(X, serve.zeros(3, 4, 3, 3), stride=2, output_padding=2), RuntimeError,
      "output padding must be smaller than either stride or dilation"),
     (lambda: F.conv_transpose2d(X, serve.zeros(4, 4, 3, 3)), RuntimeError,
      r"transposed=1, weight of size \[4, 4, 3, 3\], expected input\[2, 3, 8, 8\] to have 4 channels"),
     (lambda: F.conv_transpose2d(X, serve.zeros(3, 4, 3, 3), padding="same"), TypeError, "must be tuple of ints"),
     (lambda: F.fold(serve.zeros(2, 5, 9), (4, 4), 2), RuntimeError, "divisible by the product of kernel_size"),
     (lambda: F.fold(serve.zeros(2, 8, 8), (4, 4), 2), RuntimeError, "calculated number of sliding blocks 3 \\* 3"),
     (lambda: F.unfold(X[0, 0], 2), RuntimeError, "Only 3D or 4D input")],
)  # fmt: skip
def test_errors(call: object, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        call()  # type: ignore[operator]


# ---- modules -----------------------------------------------------------------------------------------
def _copy_params(ours: nn.Module, ref: object) -> None:
    ours.load_state_dict({k: serve.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})  # type: ignore[attr-defined]


MODULES = [
    ("Conv1d", (4, 6, 3), {"stride": 2, "padding": 1}, (2, 4, 9)),
    ("Conv1d", (4, 6, 4), {"padding": "same", "padding_mode": "reflect", "groups": 2}, (2, 4, 9)),
    ("Conv2d", (3, 6, 3), {}, (2, 3, 8, 7)),
    ("Conv2d", (3, 6, (3, 2)), {"stride": 2, "padding": (1, 2), "bias": False, "padding_mode": "circular"}, (3, 8, 7)),
    ("Conv2d", (4, 4, 3), {"padding": 1, "groups": 4, "padding_mode": "replicate"}, (2, 4, 8, 7)),
    ("Conv2d", (4, 6, 4), {"padding": "same", "padding_mode": "reflect", "dilation": 1}, (2, 4, 8, 7)),
    ("ConvTranspose1d", (4, 6, 3), {"stride": 2, "output_padding": 1}, (2, 4, 5)),
    ("ConvTranspose2d", (4, 6, 3), {"stride": 2, "padding": 1, "groups": 2, "dilation": 2}, (2, 4, 5, 4)),
]


@needs_torch
@pytest.mark.parametrize(("name", "args", "kw", "xs"), MODULES)
def test_modules_match_torch(name: str, args: tuple, kw: dict, xs: tuple) -> None:
    ref = getattr(torch.nn, name)(*args, **kw)
    ours = getattr(nn, name)(*args, **kw)
    assert repr(ours) == repr(ref)
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert [tuple(p.shape) for p in ours.parameters()] == [tuple(p.shape) for p in ref.parameters()]
    _copy_params(ours, ref)
    x = np.random.default_rng(0).uniform(-1, 1, xs).astype(np.float32)
    tx, sx = torch.tensor(x, requires_grad=True), serve.tensor(x, requires_grad=True)
    out, expected = ours(sx), ref(tx)
    assert_close(out, expected, **TOL)
    expected.square().sum().backward()
    out.square().sum().backward()
    assert_close(sx.grad, tx.grad, rtol=1e-4, atol=1e-4)
    assert_close(ours.weight.grad, ref.weight.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cls", [nn.Conv1d, nn.Conv2d, nn.ConvTranspose1d, nn.ConvTranspose2d])
def test_init_bounds(cls: type) -> None:
    m = cls(8, 6, 3, groups=2)
    fan_in = m.weight.shape[1] * math.prod(m.weight.shape[2:])
    bound = 1 / math.sqrt(fan_in)  # kaiming_uniform_(a=sqrt(5)) and the bias bound agree
    for p in (m.weight, m.bias):
        values = p.detach().numpy()
        assert np.abs(values).max() <= bound and np.abs(values).max() > bound / 2
        assert p.requires_grad


@needs_torch
def test_conv_transpose_output_size() -> None:
    ref = torch.nn.ConvTranspose2d(3, 4, 3, stride=2)
    ours = nn.ConvTranspose2d(3, 4, 3, stride=2)
    _copy_params(ours, ref)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 8, 8)).astype(np.float32)
    for size in [(18, 18), (2, 4, 17, 18)]:
        assert_close(ours(serve.tensor(x), output_size=size), ref(torch.tensor(x), output_size=size), **TOL)
    with pytest.raises(ValueError, match=r"valid sizes range from \[17, 17\] to \[18, 18\]"):
        ours(serve.tensor(x), output_size=(20, 20))
    with pytest.raises(ValueError, match="output_size must have 2 or 4 elements"):
        ours(serve.tensor(x), output_size=(18,))


@pytest.mark.parametrize(
    ("call", "match"),
    [(lambda: nn.Conv2d(3, 4, 3, groups=2), "in_channels must be divisible by groups"),
     (lambda: nn.Conv2d(4, 3, 3, groups=2), "out_channels must be divisible by groups"),
     (lambda: nn.Conv2d(4, 4, 3, groups=0), "groups must be a positive integer"),
     (lambda: nn.Conv2d(4, 4, 3, padding_mode="mirror"), "padding_mode must be one of"),
     (lambda: nn.Conv2d(4, 4, 3, padding="same", stride=2), "not supported for strided"),
     (lambda: nn.Conv2d(4, 4, 3, padding="full"), "Invalid padding string 'full'"),
     (lambda: nn.ConvTranspose2d(3, 4, 3, padding_mode="reflect"), 'Only "zeros" padding mode')],
)  # fmt: skip
def test_module_errors(call: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()  # type: ignore[operator]


def test_no_grad_records_nothing() -> None:
    m = nn.Conv2d(3, 4, 3)
    with serve.no_grad():
        out = m(serve.randn(1, 3, 5, 5))
    assert out.grad_fn is None and not out.requires_grad
    assert m(serve.randn(1, 3, 5, 5)).grad_fn is not None
