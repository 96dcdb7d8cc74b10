"""Type promotion (`torch.result_type` rules) and dtype conversions, against PyTorch."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import serve
from tests.helpers import assert_close, dtype_name, needs_torch, torch

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]

# The PyTorch promotion table for tensor + tensor of the same rank, so these run without torch too.
_EXPECTED = {
    ("uint8", "int8"): "int16", ("float16", "bfloat16"): "float32", ("bool", "uint8"): "uint8",
    ("int64", "float16"): "float16", ("int32", "bfloat16"): "bfloat16", ("uint8", "int16"): "int16",
    ("bool", "bool"): "bool", ("float16", "float32"): "float32", ("bfloat16", "float64"): "float64",
}  # fmt: skip


def _t(lib, name, shape=(2,), value=1):
    return lib.ones(shape, dtype=getattr(lib, name)) * (value if name != "bool" else True)


@pytest.mark.parametrize("a,b", list(_EXPECTED), ids=str)
def test_promotion_table_without_torch(a, b):
    assert dtype_name(_t(serve, a) + _t(serve, b)) == _EXPECTED[(a, b)]
    assert serve.promote_types(getattr(serve, a), getattr(serve, b)) is getattr(serve, _EXPECTED[(a, b)])


@needs_torch
@pytest.mark.parametrize("a", DTYPES)
def test_all_dtype_pairs(a):
    for b in DTYPES:
        ref = torch.promote_types(getattr(torch, a), getattr(torch, b))
        assert serve.promote_types(getattr(serve, a), getattr(serve, b)).name == str(ref).split(".")[-1], (a, b)
        for sa, sb in (((2,), (2,)), ((), (2,)), ((2,), ()), ((), ())):
            both_bool = a == b == "bool"
            for op in (lambda x, y: x * y, lambda x, y, both_bool=both_bool: x * y if both_bool else x + y):
                ours = op(_t(serve, a, sa), _t(serve, b, sb))
                theirs = op(_t(torch, a, sa), _t(torch, b, sb))
                assert dtype_name(ours) == dtype_name(theirs), (a, sa, b, sb)
                assert tuple(ours.shape) == tuple(theirs.shape)


@needs_torch
@pytest.mark.parametrize("a", DTYPES)
@pytest.mark.parametrize("scalar", [2, 2.5, True, -1], ids=repr)
def test_tensor_with_python_scalar(a, scalar):
    for shape in ((2,), ()):
        for op in (lambda x, s: x * s, lambda x, s: s * x, lambda x, s: x + s, lambda x, s: s + x):
            ours, theirs = op(_t(serve, a, shape), scalar), op(_t(torch, a, shape), scalar)
            if a == "uint8" and scalar == -1:
                continue  # wraps around; dtype checked below
            assert_close(ours, theirs, atol=1e-2, rtol=1e-2)
        assert dtype_name(_t(serve, a, shape) * scalar) == dtype_name(_t(torch, a, shape) * scalar)


@needs_torch
@pytest.mark.parametrize("a", DTYPES)
def test_division_promotes_to_float(a):
    for b in DTYPES:
        if a == "bool" and b == "bool":
            continue
        ours = _t(serve, a) / _t(serve, b)
        theirs = _t(torch, a) / _t(torch, b)
        assert dtype_name(ours) == dtype_name(theirs), (a, b)
    assert dtype_name(_t(serve, a) / 2) == dtype_name(_t(torch, a) / 2)


def test_int_true_division_is_float32_values():
    out = serve.tensor([1, 2, 3]) / serve.tensor([2, 2, 2])
    assert out.dtype is serve.float32
    assert out.tolist() == [0.5, 1.0, 1.5]
    assert (serve.tensor([3]) / 2).dtype is serve.float32
    assert serve.true_divide(serve.tensor([3], dtype=serve.int8), 2).tolist() == [1.5]


@needs_torch
def test_zero_dim_with_dimensioned():
    cases = [
        ("int64", (), "float16", (2,)),  # 0-d of lower category does not win
        ("float64", (), "float16", (2,)),  # same category: dimensioned wins -> float16
        ("float64", (), "int32", (2,)),  # higher category: default float -> float64 from the 0-d tensor
        ("int64", (), "int8", (2,)),
        ("int64", (), "uint8", (2,)),
        ("bool", (2,), "int64", ()),
        ("bool", (2,), "float64", ()),
        ("int8", (2,), "float16", ()),
        ("uint8", (2,), "int8", ()),
        ("bfloat16", (2,), "float16", ()),
    ]
    for a, sa, b, sb in cases:
        for op in (lambda x, y: x + y, lambda x, y: y * x, lambda x, y: serve_or_torch_max(x, y)):
            ours = op(_t(serve, a, sa), _t(serve, b, sb))
            theirs = op(_t(torch, a, sa), _t(torch, b, sb))
            assert dtype_name(ours) == dtype_name(theirs), (a, sa, b, sb)


def serve_or_torch_max(x, y):
    return x.maximum(y) if x.dtype != y.dtype else x + y


@needs_torch
@pytest.mark.parametrize("a", DTYPES[1:])
def test_where_and_comparison_promotion(a):
    for b in DTYPES:
        c = [True, False]
        ours = serve.where(serve.tensor(c), _t(serve, a), _t(serve, b))
        theirs = torch.where(torch.tensor(c), _t(torch, a), _t(torch, b))
        assert dtype_name(ours) == dtype_name(theirs), (a, b)
        assert_close(_t(serve, a) == _t(serve, b, value=1), _t(torch, a) == _t(torch, b, value=1))


@needs_torch
@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "bool"])
def test_inplace_float_into_int_raises(dtype):
    for op in (
        lambda x: x.__iadd__(1.5),
        lambda x: x.mul_(2.5),
        lambda x: x.div_(2),
        lambda x: x.add_(serve_or_torch_float(x)),
    ):
        x = _t(serve, dtype)
        with pytest.raises(RuntimeError) as ours:
            op(x)
        with pytest.raises(RuntimeError) as theirs:
            op(_t(torch, dtype))
        assert "can't be cast to the desired output type" in str(ours.value)
        assert str(ours.value) == str(theirs.value)


def serve_or_torch_float(x):
    lib = serve if isinstance(x, serve.Tensor) else torch
    return lib.ones(2)


@needs_torch
def test_inplace_allowed_casts():
    for dtype in ("int64", "int32", "uint8", "float16", "bfloat16", "float32"):
        for op in (lambda x: x.__iadd__(1), lambda x: x.mul_(True), lambda x: x.add_(serve_or_torch_int(x))):
            xs, xt = _t(serve, dtype), _t(torch, dtype)
            assert op(xs) is xs
            op(xt)
            assert_close(xs, xt)


def serve_or_torch_int(x):
    lib = serve if isinstance(x, serve.Tensor) else torch
    return lib.tensor([3, 4], dtype=lib.int64)


def test_inplace_into_bool_raises():
    b = serve.tensor([True, False])
    with pytest.raises(RuntimeError, match="result type Long can't be cast to the desired output type Bool"):
        b += 1


VALUES = [-3.7, -1.5, -0.5, 0.0, 0.49, 0.5, 1.5, 2.5, 100.9, 255.0, 300.0]


@needs_torch
@pytest.mark.parametrize("src", ["float32", "float64", "float16", "int64", "int32", "int16", "bool", "bfloat16"])
@pytest.mark.parametrize(
    "method", ["float", "half", "long", "int", "bool", "double", "short", "bfloat16", "byte", "char"]
)
def test_conversion_methods(src, method):
    vals = VALUES if src.startswith(("float", "bfloat")) else [-3, -1, 0, 1, 2, 100]
    if src == "bool":
        vals = [True, False, True]
    xs = serve.tensor(vals, dtype=getattr(serve, src))
    xt = torch.tensor(vals, dtype=getattr(torch, src))
    if method in ("byte", "char") and (src.startswith(("float", "bfloat")) or method == "byte"):
        # out-of-range and negative float->uint8 conversions are undefined behaviour in C++; keep in range
        keep = [v for v in vals if 0 <= v < 100]
        xs = serve.tensor(keep, dtype=getattr(serve, src))
        xt = torch.tensor(keep, dtype=getattr(torch, src))
    assert_close(getattr(xs, method)(), getattr(xt, method)(), atol=0, rtol=0)


@needs_torch
@pytest.mark.parametrize("dst", DTYPES)
def test_to_dtype(dst):
    vals = [-2.5, -1.0, 0.0, 0.7, 3.0]
    for src in ("float32", "int64"):
        v = vals if src == "float32" else [-2, -1, 0, 1, 3]
        if dst == "uint8":
            v = [abs(x) for x in v]
        xs = serve.tensor(v, dtype=getattr(serve, src)).to(getattr(serve, dst))
        xt = torch.tensor(v, dtype=getattr(torch, src)).to(getattr(torch, dst))
        assert_close(xs, xt, atol=0, rtol=0)
        xs2 = serve.tensor(v, dtype=getattr(serve, src)).to(dtype=getattr(serve, dst))
        assert xs2.dtype is getattr(serve, dst)


def test_to_same_dtype_returns_self_and_copy_copies():
    x = serve.tensor([1.0, 2.0])
    assert x.to(serve.float32) is x
    assert x.float() is x
    y = x.to(serve.float32, copy=True)
    assert y is not x and not np.shares_memory(y.numpy(), x.numpy())


def test_cast_gradient_flows_back_in_source_dtype():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    (x.double() * 3).half().float().sum().backward()
    assert x.grad.dtype is serve.float32
    assert x.grad.tolist() == [3.0, 3.0]
    y = serve.tensor([1.0, 2.0], requires_grad=True)
    z = y.long()
    assert not z.requires_grad


@needs_torch
def test_result_type_with_default_dtype_float64():
    prev = serve.get_default_dtype()
    tprev = torch.get_default_dtype()
    try:
        serve.set_default_dtype(serve.float64)
        torch.set_default_dtype(torch.float64)
        for a in DTYPES:
            assert dtype_name(_t(serve, a) * 1.5) == dtype_name(_t(torch, a) * 1.5), a
            assert dtype_name(_t(serve, a) / 2) == dtype_name(_t(torch, a) / 2), a
        assert serve.tensor([1.0]).dtype is serve.float64
    finally:
        serve.set_default_dtype(prev)
        torch.set_default_dtype(tprev)


@needs_torch
@pytest.mark.parametrize("a,b", list(itertools.combinations(["int8", "uint8", "int16", "float16", "bfloat16"], 2)))
def test_mixed_arithmetic_values(a, b):
    rng = np.random.default_rng(0)
    va, vb = rng.integers(1, 9, 5).tolist(), rng.integers(1, 9, 5).tolist()
    for op in (lambda x, y: x + y, lambda x, y: x * y, lambda x, y: x - y, lambda x, y: x / y, lambda x, y: x**y):
        ours = op(serve.tensor(va, dtype=getattr(serve, a)), serve.tensor(vb, dtype=getattr(serve, b)))
        theirs = op(torch.tensor(va, dtype=getattr(torch, a)), torch.tensor(vb, dtype=getattr(torch, b)))
        if dtype_name(theirs) in ("int8", "uint8", "int16") and op(2, 9) == 2**9:
            continue  # integer powers overflow the small types; the wrap-around is not specified
        assert_close(ours, theirs, atol=1e-2, rtol=1e-2)
