"""Tensor creation against PyTorch: dtype inference, memory sharing with numpy, filled and ranged tensors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import serve
from tests.helpers import assert_close, dtype_name, needs_torch, torch


@needs_torch
@pytest.mark.parametrize(
    "data",
    [1, 2.5, True, [1, 2], [1.0, 2], [True, False], [[1, 2], [3, 4]], [[True, 2], [3, 4.5]], [], [[]],
     (1, 2, 3), [[1.5], [2.5]], -7, 10**12, [1, 2.0, True]],
)  # fmt: skip
def test_tensor_dtype_inference(data):
    assert_close(serve.tensor(data), torch.tensor(data))


@needs_torch
@pytest.mark.parametrize(
    "np_dtype", ["float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool"]
)
def test_tensor_from_numpy_keeps_dtype(np_dtype):
    arr = (np.arange(6).reshape(2, 3) % 3).astype(np_dtype)
    assert_close(serve.tensor(arr), torch.tensor(arr))
    assert_close(serve.as_tensor(arr), torch.as_tensor(arr))
    assert_close(serve.from_numpy(arr), torch.from_numpy(arr))


@needs_torch
def test_tensor_with_dtype_and_nested_tensors():
    assert_close(serve.tensor([1, 2], dtype=serve.float64), torch.tensor([1, 2], dtype=torch.float64))
    assert_close(serve.tensor(np.float64(2.5)), torch.tensor(np.float64(2.5)))
    assert_close(
        serve.tensor([serve.tensor(1.0), serve.tensor(2.0)]), torch.tensor([torch.tensor(1.0), torch.tensor(2.0)])
    )
    assert_close(serve.tensor(serve.tensor([1, 2])), torch.tensor([1, 2]))


def test_tensor_copies():
    arr = np.zeros(3, dtype=np.float32)
    t = serve.tensor(arr)
    arr[0] = 1
    assert t[0].item() == 0.0
    src = serve.zeros(2)
    copy = serve.tensor(src)
    src[0] = 5.0
    assert copy[0].item() == 0.0


def test_tensor_errors():
    with pytest.raises(ValueError):
        serve.tensor([[1, 2], [3]])
    with pytest.raises((TypeError, RuntimeError)):
        serve.tensor([1, "a"])


def test_as_tensor_shares():
    arr = np.zeros(3, dtype=np.float32)
    t = serve.as_tensor(arr)
    arr[1] = 4
    assert t[1].item() == 4.0
    x = serve.ones(2)
    assert serve.as_tensor(x) is x
    assert serve.as_tensor(x, dtype=serve.float64).dtype == serve.float64


def test_from_numpy_shares_both_ways():
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = serve.from_numpy(arr)
    arr[0, 0] = 100
    assert t[0, 0].item() == 100.0
    t[1, 2] = -1.0
    assert arr[1, 2] == -1
    t.add_(1)
    assert arr[0, 0] == 101
    assert t.numpy() is arr or np.shares_memory(t.numpy(), arr)


def test_from_numpy_dtypes():
    assert serve.from_numpy(np.zeros(2, dtype=ml_dtypes.bfloat16)).dtype == serve.bfloat16
    assert serve.from_numpy(np.zeros(2, dtype=np.float16)).dtype == serve.float16
    assert serve.from_numpy(np.zeros(2, dtype=np.int32)).dtype == serve.int32
    assert serve.from_numpy(np.zeros(2, dtype=np.int64)).dtype == serve.int64
    with pytest.raises(TypeError):
        serve.from_numpy(np.zeros(2, dtype=np.uint16))
    with pytest.raises(TypeError):
        serve.from_numpy(np.array([1, "a"], dtype=object))
    with pytest.raises(TypeError, match=r"expected np\.ndarray"):
        serve.from_numpy([1, 2])


# ---- filled tensors ----------------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("name", ["zeros", "ones"])
@pytest.mark.parametrize("args", [(2, 3), ((2, 3),), ([4],), ((),), (0, 2)])
def test_zeros_ones(name, args):
    assert_close(getattr(serve, name)(*args), getattr(torch, name)(*args))
    assert_close(getattr(serve, name)(*args, dtype=serve.int32), getattr(torch, name)(*args, dtype=torch.int32))
    assert tuple(serve.empty(*args).shape) == tuple(torch.empty(*args).shape)


@needs_torch
@pytest.mark.parametrize("value", [1.5, 2, True, -3, 0.0])
def test_full_infers_dtype(value):
    assert_close(serve.full((2, 2), value), torch.full((2, 2), value))
    assert_close(serve.full([3], value, dtype=serve.float64), torch.full([3], value, dtype=torch.float64))


def test_size_errors():
    with pytest.raises(RuntimeError, match="negative dimension -1"):
        serve.zeros(2, -1)
    with pytest.raises(TypeError):
        serve.ones(2.5)


@needs_torch
@pytest.mark.parametrize("args", [(3,), (2, 4), (4, 2), (0,)])
def test_eye(args):
    assert_close(serve.eye(*args), torch.eye(*args))
    assert_close(serve.eye(*args, dtype=serve.int64), torch.eye(*args, dtype=torch.int64))


@needs_torch
@pytest.mark.parametrize(
    "args",
    [(5,), (2, 7), (1, 10, 3), (0.0, 1.0, 0.1), (10, 0, -2), (5.0,), (1, 2.5, 0.5), (-3, 3), (0, -1.5, -0.5),
     (3, 3), (0, 1, 0.3)],
)  # fmt: skip
def test_arange(args):
    assert_close(serve.arange(*args), torch.arange(*args))
    assert_close(serve.arange(*args, dtype=serve.float64), torch.arange(*args, dtype=torch.float64))


def test_arange_errors():
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        serve.arange(0, 5, 0)
    with pytest.raises(RuntimeError, match="upper bound and larger bound inconsistent with step sign"):
        serve.arange(0, 5, -1)
    with pytest.raises(RuntimeError, match="upper bound and larger bound inconsistent with step sign"):
        serve.arange(5, 0)


@needs_torch
@pytest.mark.parametrize("args", [(0, 1, 5), (-1, 1, 4), (2, 2, 1), (0, 10, 0), (1.5, -2.5, 7), (0, 1, 100)])
def test_linspace(args):
    assert_close(serve.linspace(*args), torch.linspace(*args), atol=1e-6, rtol=1e-6)
    assert_close(serve.linspace(*args, dtype=serve.float64), torch.linspace(*args, dtype=torch.float64))


def test_linspace_errors():
    with pytest.raises(RuntimeError, match="number of steps must be non-negative"):
        serve.linspace(0, 1, -1)


# ---- *_like and new_* --------------------------------------------------------------------------------------
@needs_torch
def test_like_functions():
    s, t = serve.ones(2, 3, dtype=serve.int32), torch.ones(2, 3, dtype=torch.int32)
    assert_close(serve.zeros_like(s), torch.zeros_like(t))
    assert_close(serve.ones_like(s, dtype=serve.float16), torch.ones_like(t, dtype=torch.float16))
    assert_close(serve.full_like(s, 7), torch.full_like(t, 7))
    assert_close(serve.full_like(s, 2.5, dtype=serve.float32), torch.full_like(t, 2.5, dtype=torch.float32))
    assert serve.empty_like(s).shape == (2, 3) and serve.empty_like(s).dtype == serve.int32
    r = serve.zeros_like(serve.ones(2), requires_grad=True)
    assert r.requires_grad and r.is_leaf


@needs_torch
def test_new_functions():
    s, t = serve.ones(2, dtype=serve.float64), torch.ones(2, dtype=torch.float64)
    assert_close(s.new_zeros(3, 1), t.new_zeros(3, 1))
    assert_close(s.new_ones((2, 2)), t.new_ones((2, 2)))
    assert_close(s.new_full((2,), 4), t.new_full((2,), 4))
    assert_close(s.new_tensor([1, 2]), t.new_tensor([1, 2]))
    assert_close(s.new_zeros(2, dtype=serve.int64), t.new_zeros(2, dtype=torch.int64))
    assert s.new_empty(4).shape == (4,) and s.new_empty(4).dtype == serve.float64
    assert s.new_tensor([1.0], requires_grad=True).requires_grad


def test_requires_grad_on_int_raises():
    with pytest.raises(RuntimeError, match="only Tensors of floating point and complex dtype can require gradients"):
        serve.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="only Tensors of floating point"):
        serve.zeros(2, dtype=serve.int64, requires_grad=True)
    with pytest.raises(RuntimeError, match="only Tensors of floating point"):
        serve.arange(3, requires_grad=True)
    assert serve.ones(2, requires_grad=True).requires_grad


def test_default_dtype_is_used():
    serve.set_default_dtype(serve.float64)
    try:
        assert serve.tensor([1.0]).dtype == serve.float64
        assert serve.zeros(2).dtype == serve.float64
        assert serve.arange(0.0, 1.0, 0.5).dtype == serve.float64
        assert serve.tensor([1]).dtype == serve.int64
    finally:
        serve.set_default_dtype(serve.float32)
    assert dtype_name(serve.full((1,), 1.0)) == "float32"
