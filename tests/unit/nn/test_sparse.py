"""Embedding, EmbeddingBag and one_hot against PyTorch: lookups, weight gradients, padding_idx, max_norm, bags."""

import numpy as np
import pytest

import serve
from serve import nn
from tests.helpers import assert_close, check_op, needs_torch, torch

TOL = {"rtol": 1e-5, "atol": 1e-6}
F = serve.nn.functional
IDX = np.array([[1, 4, 4, 0], [9, 2, 4, 7]])


@pytest.mark.parametrize("kwargs", [{}, {"padding_idx": 4}, {"padding_idx": -1}, {"scale_grad_by_freq": True}])
@pytest.mark.parametrize("indices", [IDX, IDX[0], np.array(3)], ids=["2d", "1d", "0d"])
def test_embedding(kwargs, indices):
    # padding_idx and scale_grad_by_freq change the gradient on purpose: compare with torch, not finite differences
    check_op([(10, 3), indices], lambda lib, w, i: lib.nn.functional.embedding(i, w, **kwargs), fd=not kwargs, **TOL)


def test_embedding_int32_indices():
    check_op([(10, 3), IDX.astype(np.int32)], lambda lib, w, i: lib.nn.functional.embedding(i, w), **TOL)


@needs_torch
def test_embedding_max_norm_renormalizes_weight_in_place():
    w = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32) * 2
    ws, wt = serve.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    ys = F.embedding(serve.tensor(IDX), ws, max_norm=1.5)
    yt = torch.nn.functional.embedding(torch.tensor(IDX), wt, max_norm=1.5)
    assert_close(ys, yt, **TOL)
    assert_close(ws, wt.detach(), **TOL)  # looked-up rows scaled down, the others untouched
    (ys * ys).sum().backward()
    (yt * yt).sum().backward()
    assert_close(ws.grad, wt.grad, **TOL)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: F.embedding(serve.tensor([5]), serve.randn(5, 3)), IndexError, "index out of range in self"),
        (lambda: F.embedding(serve.tensor([-1]), serve.randn(5, 3)), IndexError, "index out of range in self"),
        (lambda: F.embedding(serve.tensor([1.0]), serve.randn(5, 3)), RuntimeError, "'indices' to have one of"),
        (lambda: nn.Embedding(5, 3, padding_idx=5), ValueError, "Padding_idx must be within num_embeddings"),
        (lambda: nn.Embedding(5, 3, padding_idx=-6), ValueError, "Padding_idx must be within num_embeddings"),
        (lambda: nn.Embedding(5, 3, _weight=serve.randn(4, 3)), ValueError, "Shape of weight does not match"),
        (lambda: nn.Embedding.from_pretrained(serve.randn(4)), ValueError, "expected to be 2-dimensional"),
    ],
)
def test_embedding_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ---- embedding_bag ------------------------------------------------------------------------------------
FLAT = np.array([1, 2, 4, 5, 4, 3, 2, 9, 4])
OFFSETS = np.array([0, 2, 2, 5])


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 4])
def test_embedding_bag_offsets(mode, padding_idx):
    def fn(lib, w, i, o):
        return lib.nn.functional.embedding_bag(i, w, o, mode=mode, padding_idx=padding_idx)

    check_op([(10, 3), FLAT, OFFSETS], fn, fd=padding_idx is None, **TOL)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_2d_input_and_last_offset(mode):
    check_op([(10, 3), IDX], lambda lib, w, i: lib.nn.functional.embedding_bag(i, w, mode=mode), **TOL)
    offsets = np.append(OFFSETS, FLAT.size)

    def fn(lib, w, i, o):
        return lib.nn.functional.embedding_bag(i, w, o, mode=mode, include_last_offset=True)

    check_op([(10, 3), FLAT, offsets], fn, **TOL)


def test_embedding_bag_max_repeated_index_gets_gradient_once():
    check_op([(10, 3), np.array([3, 3, 1]), np.array([0])],
             lambda lib, w, i, o: lib.nn.functional.embedding_bag(i, w, o, mode="max"), **TOL)  # fmt: skip


def test_embedding_bag_per_sample_weights():
    def fn(lib, w, psw, i, o):
        return lib.nn.functional.embedding_bag(i, w, o, mode="sum", per_sample_weights=psw, padding_idx=2)

    check_op([(10, 3), (FLAT.size,), FLAT, OFFSETS], fn, fd=False, **TOL)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "foo"}, ValueError, "mode has to be one of sum, mean or max"),
        ({"mode": "max", "per_sample_weights": serve.ones(2)}, NotImplementedError, "only supported for mode='sum'"),
        ({"offsets": None}, ValueError, "offsets has to be a 1D Tensor"),
        ({"offsets": serve.tensor([1])}, RuntimeError, "offsets\\[0\\] has to be 0"),
        ({"per_sample_weights": serve.ones(3), "mode": "sum"}, ValueError, "must have the same shape as the input"),
    ],
)
def test_embedding_bag_errors(kwargs, error, match):
    kwargs = {"offsets": serve.tensor([0]), **kwargs}
    with pytest.raises(error, match=match):
        F.embedding_bag(serve.tensor([1, 2]), serve.randn(5, 3), **kwargs)
    with pytest.raises(ValueError, match="if input is 2D, then offsets has to be None"):
        F.embedding_bag(serve.tensor([[1, 2]]), serve.randn(5, 3), serve.tensor([0]))


# ---- one_hot ------------------------------------------------------------------------------------------
@needs_torch
def test_one_hot():
    for t, n in ((np.array([0, 2, 1]), -1), (np.array([[0, 3], [1, 1]]), 5), (np.array(2), 4)):
        assert_close(F.one_hot(serve.tensor(t), n), torch.nn.functional.one_hot(torch.tensor(t), n))


@pytest.mark.parametrize(
    ("values", "n", "match"),
    [([5], 3, "smaller than num_classes"), ([-1], 3, "non-negative"), ([1.0], 3, "LongTensor"), ([], -1, "empty")],
)
def test_one_hot_errors(values, n, match):
    t = serve.tensor(values, dtype=serve.float32 if values and isinstance(values[0], float) else serve.int64)
    with pytest.raises(RuntimeError, match=match):
        F.one_hot(t, n)


# ---- modules ------------------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("kwargs", [{}, {"padding_idx": 2}, {"padding_idx": -1, "max_norm": 1.0}, {"norm_type": 1.0},
                                    {"scale_grad_by_freq": True}, {"sparse": True}])  # fmt: skip
def test_embedding_module(kwargs):
    ours, ref = nn.Embedding(10, 3, **kwargs), torch.nn.Embedding(10, 3, **kwargs)
    assert repr(ours) == repr(ref)
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert ours.weight.shape == ref.weight.shape and ours.padding_idx == ref.padding_idx
    if ours.padding_idx is not None:
        assert not ours.weight.detach()[ours.padding_idx].numpy().any()
    ours.load_state_dict({k: serve.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    ys, yt = ours(serve.tensor(IDX)), ref(torch.tensor(IDX))
    assert_close(ys, yt, **TOL)
    ys.sum().backward()
    yt.sum().backward()
    assert_close(ours.weight.grad, ref.weight.grad.to_dense(), **TOL)


def test_embedding_init_is_standard_normal():
    w = nn.Embedding(1000, 64).weight.detach().numpy()
    assert abs(w.mean()) < 0.02 and w.std() == pytest.approx(1.0, rel=0.02)


def test_embedding_from_pretrained():
    weights = serve.randn(6, 4)
    layer = nn.Embedding.from_pretrained(weights, padding_idx=1)
    assert not layer.weight.requires_grad and layer.padding_idx == 1
    assert_close(layer(serve.tensor([3])), weights[3:4])
    assert nn.Embedding.from_pretrained(weights, freeze=False).weight.requires_grad


@needs_torch
def test_embedding_bag_module():
    kwargs = {"mode": "max", "padding_idx": 4}
    ours, ref = nn.EmbeddingBag(10, 3, **kwargs), torch.nn.EmbeddingBag(10, 3, **kwargs)
    assert repr(ours) == repr(ref)
    assert repr(nn.EmbeddingBag(10, 3)) == repr(torch.nn.EmbeddingBag(10, 3))
    assert list(ours.state_dict()) == list(ref.state_dict())
    ours.load_state_dict({k: serve.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    assert_close(ours(serve.tensor(FLAT), serve.tensor(OFFSETS)), ref(torch.tensor(FLAT), torch.tensor(OFFSETS)), **TOL)
    bag = nn.EmbeddingBag.from_pretrained(serve.randn(5, 2), mode="sum")
    assert bag.mode == "sum" and not bag.weight.requires_grad
