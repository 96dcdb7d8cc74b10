"""F.pad, F.interpolate / F.upsample and the padding and upsampling modules, against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import serve
import serve.nn.functional as F
from serve import nn
from tests.helpers import assert_close, check_op, needs_torch, torch

TOL = {"rtol": 1e-5, "atol": 1e-6}

PADS = [  # input, pad, mode
    ((2, 3, 5), (1, 2), "constant"),
    ((2, 3, 5, 4), (1, 0, 2, 3), "constant"),
    ((2, 3, 5, 4), (-1, 2, 0, -2), "constant"),  # negative pads crop
    ((2, 3, 5, 4), (1, 1, 1, 1, 1, 1, 1, 1), "constant"),  # every dim
    ((2, 3, 5), (2, 3), "reflect"),
    ((3, 5), (4, 1), "reflect"),  # unbatched
    ((2, 3, 5, 4), (3, 1, 2, 4), "reflect"),
    ((2, 3, 5, 4), (-1, 2, 1, -2), "reflect"),
    ((2, 3, 5, 4), (1, 6, 2, 0), "replicate"),
    ((2, 3, 5), (-2, 3), "replicate"),
    ((2, 3, 5, 4), (4, 1, 5, 2), "circular"),
    ((2, 3, 5, 4), (-1, 2, 2, -3), "circular"),
    ((1, 2, 3, 5, 4), (1, 2, 1, 1, 2, 0), "replicate"),  # 3 padded dims
    ((2, 3, 4, 4), (1, 2, 1, 1, 2, 0), "reflect"),  # unbatched 3-d
]


@pytest.mark.parametrize(("xs", "pad", "mode"), PADS)
def test_pad(xs: tuple, pad: tuple, mode: str) -> None:
    check_op([xs], lambda lib, x: lib.nn.functional.pad(x, pad, mode=mode), **TOL)


def test_constant_value() -> None:
    check_op([(2, 3, 4)], lambda lib, x: lib.nn.functional.pad(x, (1, 2, 0, 1), value=2.5), **TOL)


@needs_torch
def test_pad_second_derivative() -> None:
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 5, 4)).astype(np.float32)
    grads = []
    for lib in (serve, torch):
        t = lib.tensor(x, requires_grad=True)
        y = lib.nn.functional.pad(t, (2, 1, 3, 0), mode="reflect")
        (g,) = lib.autograd.grad((y**3).sum(), t, create_graph=True)
        (g * g).sum().backward()
        grads.append(t.grad)
    assert_close(*grads, **TOL)


X = serve.zeros(2, 3, 8, 8)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [(lambda: F.pad(X, (1, 2, 3)), RuntimeError, "Padding length must be divisible by 2"),
     (lambda: F.pad(X, (1,) * 10), RuntimeError, "less than or equal to two times the input dimension"),
     (lambda: F.pad(X, (1, 1), mode="reflect"), NotImplementedError, "Padding size 2 is not supported for 4D"),
     (lambda: F.pad(X, (8, 1, 0, 0), mode="reflect"), RuntimeError, r"padding \(8, 1\) at dimension 3"),
     (lambda: F.pad(X, (9, 0, 0, 0), mode="circular"), RuntimeError, "wrapping around more than once"),
     (lambda: F.pad(X, (1, 1, 1, 1), mode="mirror"), NotImplementedError, "Unrecognised padding mode mirror"),
     (lambda: F.pad(X, (1, 1, 1, 1), mode="reflect", value=1.0), RuntimeError, "doesn't take in value argument"),
     (lambda: F.pad(X[:, :, :0], (1, 1, 1, 1), mode="replicate"), RuntimeError, "non-zero dimensions"),
     (lambda: F.pad(X, (-9, 0)), RuntimeError, "length must be non-negative"),
     (lambda: F.pad(X, (1.5, 1)), TypeError, "must be tuple of ints")],
)  # fmt: skip
def test_pad_errors(call: object, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        call()  # type: ignore[operator]


INTERP = [  # input, kwargs
    ((2, 3, 5), {"scale_factor": 2}),
    ((2, 3, 5), {"size": 7}),
    ((2, 3, 5), {"size": 3, "mode": "linear"}),
    ((2, 3, 5), {"scale_factor": 1.7, "mode": "linear", "align_corners": True}),
    ((2, 3, 5, 4), {"scale_factor": 2}),
    ((2, 3, 5, 4), {"scale_factor": (1.5, 2.3)}),
    ((2, 3, 5, 4), {"size": (3, 9)}),
    ((2, 3, 5, 4), {"size": (8, 3), "mode": "nearest-exact"}),
    ((2, 3, 5, 4), {"scale_factor": 0.6, "mode": "nearest-exact"}),
    ((2, 3, 5, 4), {"scale_factor": 2, "mode": "bilinear"}),
    ((2, 3, 5, 4), {"scale_factor": 2, "mode": "bilinear", "align_corners": True}),
    ((2, 3, 5, 4), {"size": (7, 3), "mode": "bilinear"}),
    ((2, 3, 5, 4), {"size": (1, 9), "mode": "bilinear", "align_corners": True}),
    ((2, 3, 5, 4), {"scale_factor": 1.7, "mode": "bilinear", "recompute_scale_factor": True}),
    ((2, 3, 5, 4), {"scale_factor": (0.5, 1.3), "mode": "bilinear"}),
    ((2, 3, 6, 4), {"scale_factor": 0.5, "mode": "area"}),
    ((2, 3, 6, 5), {"size": (4, 3), "mode": "area"}),
    ((2, 3, 5), {"size": 3, "mode": "area"}),
    ((1, 2, 3, 4, 5), {"scale_factor": 1.5, "mode": "trilinear"}),
    ((1, 2, 3, 4, 5), {"size": (2, 5, 7)}),
]


@pytest.mark.parametrize(("xs", "kw"), INTERP)
def test_interpolate(xs: tuple, kw: dict) -> None:
    check_op([xs], lambda lib, x: lib.nn.functional.interpolate(x, **kw), **TOL)


@needs_torch
@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_interpolate_dtypes(dtype: str, mode: str) -> None:
    tol = {"float16": 2e-3, "bfloat16": 2e-2, "float64": 1e-12}[dtype]
    check_op([(2, 3, 5, 4)], lambda lib, x: lib.nn.functional.interpolate(x, scale_factor=1.5, mode=mode),
             dtype=dtype, grad=False, rtol=tol, atol=tol)  # fmt: skip


@needs_torch
def test_upsample_aliases() -> None:
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 4, 5)).astype(np.float32)
    for name, kw in (("upsample", {"scale_factor": 2, "mode": "bilinear"}), ("upsample_nearest", {"size": 7}),
                     ("upsample_bilinear", {"scale_factor": 2})):  # fmt: skip
        with pytest.warns(UserWarning, match="deprecated"):
            ours = getattr(F, name)(serve.tensor(x), **kw)
        with pytest.warns(UserWarning):
            ref = getattr(torch.nn.functional, name)(torch.tensor(x), **kw)
        assert_close(ours, ref, **TOL)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [(lambda: F.interpolate(X, size=4, scale_factor=2), ValueError, "only one of size or scale_factor"),
     (lambda: F.interpolate(X), ValueError, "either size or scale_factor should be defined"),
     (lambda: F.interpolate(X, scale_factor=2, align_corners=True), ValueError, "align_corners option"),
     (lambda: F.interpolate(X[0], scale_factor=2, mode="bilinear"), NotImplementedError, "Got 3D input, but bilinear"),
     (lambda: F.interpolate(X, scale_factor=2, mode="linear"), NotImplementedError, "Got 4D input, but linear"),
     (lambda: F.interpolate(X, scale_factor=2, mode="cubic"), NotImplementedError, "Input Error"),
     (lambda: F.interpolate(X[0, 0], scale_factor=2), NotImplementedError, r"\(got 2D\)"),
     (lambda: F.interpolate(X, size=(2, 3, 4)), ValueError, "same number of spatial dimensions"),
     (lambda: F.interpolate(X, scale_factor=(2, 3, 4)), ValueError, "same number of spatial dimensions"),
     (lambda: F.interpolate(X, size=3, recompute_scale_factor=True), ValueError, "not meaningful"),
     (lambda: F.interpolate(X, scale_factor=0.01), RuntimeError, "sizes should be greater than 0"),
     (lambda: F.interpolate(X.long(), scale_factor=2), NotImplementedError, "not implemented for 'int64'")],
)  # fmt: skip
def test_interpolate_errors(call: object, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        call()  # type: ignore[operator]


MODULES = [
    ("ZeroPad1d", ((1, 2),), (2, 3, 5)),
    ("ZeroPad2d", (2,), (2, 3, 5, 4)),
    ("ConstantPad1d", (2, 3.5), (2, 3, 5)),
    ("ConstantPad2d", ((1, 2, 3, 0), 1.0), (2, 3, 5, 4)),
    ("ReflectionPad1d", (2,), (2, 3, 5)),
    ("ReflectionPad2d", ((1, 2, 3, 0),), (3, 5, 4)),
    ("ReplicationPad1d", (3,), (2, 3, 5)),
    ("ReplicationPad2d", ((1, 2, 3, 0),), (2, 3, 5, 4)),
    ("CircularPad1d", (2,), (2, 3, 5)),
    ("CircularPad2d", (1,), (2, 3, 5, 4)),
    ("Upsample", ((7, 3),), (2, 3, 5, 4)),
    ("Upsample", (None, 1.5, "bilinear"), (2, 3, 5, 4)),
    ("Upsample", (None, (2, 3), "bilinear", True), (2, 3, 5, 4)),
    ("Upsample", (None, 2.0, "linear", False), (2, 3, 5)),
    ("UpsamplingNearest2d", (None, 2), (2, 3, 5, 4)),
    ("UpsamplingBilinear2d", ((7, 9),), (2, 3, 5, 4)),
]


@needs_torch
@pytest.mark.parametrize(("name", "args", "xs"), MODULES)
def test_modules_match_torch(name: str, args: tuple, xs: tuple) -> None:
    ref, ours = getattr(torch.nn, name)(*args), getattr(nn, name)(*args)
    assert repr(ours) == repr(ref)
    assert list(ours.state_dict()) == []
    x = np.random.default_rng(0).uniform(-1, 1, xs).astype(np.float32)
    assert_close(ours(serve.tensor(x)), ref(torch.tensor(x)), **TOL)
