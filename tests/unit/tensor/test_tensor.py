"""The Tensor object itself against PyTorch: attributes, conversions, the Python protocol, repr, copy and pickle."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import serve
from tests.helpers import assert_close, needs_torch, torch


def test_attributes():
    x = serve.zeros(2, 3, 4)
    assert x.shape == (2, 3, 4) and isinstance(x.shape, serve.Size) and repr(x.shape) == "serve.Size([2, 3, 4])"
    assert x.size() == (2, 3, 4) and x.size(1) == 3 and x.size(-1) == 4
    assert x.dim() == 3 and x.ndim == 3 and x.numel() == 24
    assert x.dtype == serve.float32 and x.device == serve.device("cpu") and str(x.device) == "cpu"
    assert not x.is_cuda and x.is_cpu
    assert not x.requires_grad and x.grad is None and x.grad_fn is None and x.is_leaf
    assert x.T.shape == (4, 3, 2) and x.mT.shape == (2, 4, 3)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.size(3)
    with pytest.raises(RuntimeError, match="mT is only supported on matrices"):
        serve.zeros(3).mT
    y = serve.ones(2, requires_grad=True)
    z = y * 2
    assert y.requires_grad and y.is_leaf and not z.is_leaf and z.grad_fn is not None
    z.sum().backward()
    assert y.grad.tolist() == [2.0, 2.0]


def test_item_tolist_numpy():
    assert serve.tensor(2.5).item() == 2.5 and isinstance(serve.tensor(3).item(), int)
    assert serve.tensor([True]).item() is True
    assert serve.tensor([[1, 2]]).tolist() == [[1, 2]] and serve.tensor(1.5).tolist() == 1.5
    with pytest.raises(RuntimeError, match="a Tensor with 2 elements cannot be converted to Scalar"):
        serve.tensor([1, 2]).item()
    x = serve.zeros(3)
    arr = x.numpy()
    arr[0] = 5
    assert x[0].item() == 5.0
    with pytest.raises(RuntimeError, match=r"Can't call numpy\(\) on Tensor that requires grad"):
        serve.ones(2, requires_grad=True).numpy()
    assert serve.ones(2, requires_grad=True).detach().numpy().tolist() == [1.0, 1.0]
    assert serve.tensor([1.0, 2.0], dtype=serve.bfloat16).tolist() == [1.0, 2.0]


def test_clone_detach_contiguous():
    x = serve.arange(6.0).view(2, 3)
    c = x.clone()
    c[0, 0] = 9.0
    assert x[0, 0].item() == 0.0
    d = x.detach()
    d[0, 0] = 7.0
    assert x[0, 0].item() == 7.0
    y = serve.ones(2, requires_grad=True)
    assert not y.detach().requires_grad and y.clone().grad_fn is not None
    t = x.t()
    assert not t.is_contiguous() and t.contiguous().is_contiguous() and x.contiguous() is x


def test_to_and_cpu():
    x = serve.tensor([1.7, -2.2])
    assert x.to(serve.int64).tolist() == [1, -2] and x.to(serve.int64).dtype == serve.int64
    assert x.to("cpu") is x and x.cpu() is x and x.to(serve.float32) is x
    assert x.to(dtype=serve.float64).dtype == serve.float64
    assert x.to("cpu", serve.float16).dtype == serve.float16
    assert x.to(serve.zeros(1, dtype=serve.int32)).dtype == serve.int32
    assert x.to(serve.float32, copy=True) is not x
    assert x.double().dtype == serve.float64 and x.half().dtype == serve.float16 and x.long().dtype == serve.int64
    assert x.int().dtype == serve.int32 and x.bool().tolist() == [True, True] and x.float() is x
    assert x.type() == "serve.FloatTensor" and x.type(serve.float64).dtype == serve.float64


def test_cuda_unavailable():
    if serve.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="CUDA"):
        serve.zeros(2).cuda()
    with pytest.raises(RuntimeError, match="CUDA"):
        serve.zeros(2).to("cuda")


def test_python_protocol():
    x = serve.tensor([[1, 2], [3, 4], [5, 6]])
    assert len(x) == 3
    assert [r.tolist() for r in x] == [[1, 2], [3, 4], [5, 6]]
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(serve.tensor(1))
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        iter(serve.tensor(1))
    assert bool(serve.tensor([1])) and not bool(serve.tensor(0.0))
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value is ambiguous"):
        bool(serve.tensor([1, 2]))
    with pytest.raises(RuntimeError, match="ambiguous"):
        if serve.tensor([1, 2]):
            pass
    assert float(serve.tensor(2)) == 2.0 and int(serve.tensor(2.9)) == 2
    assert [10, 20, 30][serve.tensor(1)] == 20
    with pytest.raises(TypeError, match="only integer tensors of a single element can be converted to an index"):
        [1, 2][serve.tensor(1.0)]
    assert f"{serve.tensor(2.5):.2f}" == "2.50"


REPR_CASES = [
    "lib.tensor([1., 2.])",
    "lib.tensor([1.5, 2.0])",
    "lib.tensor([1, 2, 3])",
    "lib.tensor([True, False])",
    "lib.tensor(3.5)",
    "lib.tensor(2)",
    "lib.tensor(True)",
    "lib.tensor([])",
    "lib.zeros(0, 3)",
    "lib.zeros(2, 0, dtype=lib.int64)",
    "lib.tensor([[1., 2.], [3., 4.]])",
    "lib.tensor([[1.25, -2.], [3., 4.]])",
    "lib.tensor([1., 2.], requires_grad=True)",
    "lib.tensor([1., 2.], dtype=lib.float64)",
    "lib.tensor([1., 2.], dtype=lib.float16)",
    "lib.tensor([1, 2], dtype=lib.int32)",
    "lib.tensor([1., 2.], requires_grad=True) * 2",
    "lib.tensor([1., 2.], requires_grad=True).sum()",
    "lib.tensor([-1., 2.])",
    "lib.tensor([-1.5, 2.25])",
    "lib.tensor([1e-5, 1.])",
    "lib.tensor([1e10, 1.])",
    "lib.tensor([float('nan'), 1.])",
    "lib.tensor([float('inf'), -1.5])",
    "lib.tensor([[1, -20], [300, 4]])",
    "lib.tensor([0.1, 0.25])",
    "lib.tensor([100.5, 2.])",
    "lib.tensor([1e-3, 1.])",
    "lib.tensor([12345.678])",
    "lib.tensor([0., 0.])",
    "lib.tensor([[True], [False]])",
    "lib.tensor(1.5, dtype=lib.float64)",
    "lib.arange(20.)",
    "lib.arange(2000)",
    "lib.zeros(2, 3, dtype=lib.uint8)",
    "lib.tensor([0.001, 0.002])",
    "lib.tensor([1.5, 2.], dtype=lib.float64, requires_grad=True)",
    "lib.tensor(-0.)",
    "lib.tensor([1e-10])",
    "lib.tensor([123456789.])",
    "lib.ones(2, 2, 2)",
    "lib.arange(30.).view(3, 10) / 7",
    "lib.arange(2000.).view(40, 50)",
    "lib.arange(4000).view(2, 20, 100)",
    "lib.arange(24).view(2, 3, 4)",
    "lib.arange(1001.) / 3",
    "lib.tensor([[float('nan')]])",
    "lib.tensor([1., 2.], dtype=lib.bfloat16)",
]


@needs_torch
@pytest.mark.parametrize("expr", REPR_CASES)
def test_repr_matches_torch(expr):
    ours = eval(expr, {"lib": serve})
    ref = eval(expr, {"lib": torch})
    assert repr(ours) == repr(ref).replace("torch.", "serve.")
    assert str(ours) == repr(ours)


def test_repr_without_torch():
    assert repr(serve.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert repr(serve.tensor([1.5, 2.0])) == "tensor([1.5000, 2.0000])"
    assert repr(serve.tensor([1, 2], dtype=serve.int32)) == "tensor([1, 2], dtype=serve.int32)"
    assert repr(serve.ones(1, requires_grad=True)) == "tensor([1.], requires_grad=True)"


def test_deepcopy():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    x.grad = serve.tensor([0.5, 0.5])
    y = copy.deepcopy(x)
    assert y is not x and y.tolist() == x.tolist() and y.requires_grad and y.is_leaf
    assert y.grad.tolist() == [0.5, 0.5] and y.grad is not x.grad
    with serve.no_grad():
        y[0] = 9.0
    assert x[0].item() == 1.0
    shared = [x, x]
    a, b = copy.deepcopy(shared)
    assert a is b
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(x * 2)


@pytest.mark.parametrize("dt", ["float32", "float64", "float16", "bfloat16", "int64", "int32", "bool", "uint8"])
def test_pickle_round_trip(dt):
    x = serve.tensor([[1, 0], [3, 4]], dtype=getattr(serve, dt))
    y = pickle.loads(pickle.dumps(x))
    assert y.dtype == x.dtype and y.shape == x.shape and y.tolist() == x.tolist()
    z = pickle.loads(pickle.dumps(serve.ones(2, requires_grad=True)))
    assert z.requires_grad and z.is_leaf
    t = pickle.loads(pickle.dumps(serve.arange(6.0).view(2, 3).t()))
    assert t.tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]


@needs_torch
def test_stride_and_element_size_match_torch():
    for expr in ["lib.zeros(2, 3, 4)", "lib.zeros(2, 3).t()", "lib.zeros(4, 3)[::2]", "lib.zeros(3, 1).expand(3, 4)"]:
        ours, ref = eval(expr, {"lib": serve}), eval(expr, {"lib": torch})
        assert ours.stride() == ref.stride() and ours.is_contiguous() == ref.is_contiguous()
    assert serve.zeros(1, dtype=serve.float16).element_size() == 2
    assert_close(serve.zeros(2, 3).t(), torch.zeros(2, 3).t())


def test_numpy_interop():
    x = serve.tensor([1.0, 2.0])
    assert np.asarray(x).tolist() == [1.0, 2.0]
    assert np.asarray(x, dtype=np.int64).dtype == np.int64
