"""Shape and movement ops against PyTorch: values, gradients, views sharing memory, and error messages."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from tests.helpers import assert_close, check_op, needs_torch, torch


# ---- reshape / view -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fn",
    [
        lambda lib, x: x.reshape(6, 4),
        lambda lib, x: x.reshape(-1),
        lambda lib, x: x.reshape(2, -1, 3),
        lambda lib, x: x.reshape((4, 6)),
        lambda lib, x: x.view(2, -1),
        lambda lib, x: x.view(24),
        lambda lib, x: x.view((3, 8)),
        lambda lib, x: lib.reshape(x, (-1, 2)),
        lambda lib, x: x.view_as(lib.zeros(4, 6)),
        lambda lib, x: x.reshape_as(lib.zeros(12, 2)),
        lambda lib, x: x.permute(2, 0, 1).reshape(4, 6),
    ],
)
def test_reshape_view(fn):
    check_op([(2, 3, 4)], fn)


def test_view_shares_memory():
    x = serve.zeros(2, 3)
    v = x.view(3, 2)
    with serve.no_grad():
        v[0] = 7.0
    assert x.tolist() == [[7.0, 7.0, 0.0], [0.0, 0.0, 0.0]]
    r = x.reshape(6)
    r[5] = 1.0
    assert x[1, 2].item() == 1.0


def test_view_on_transposed_raises():
    x = serve.zeros(2, 3).t()
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        x.view(6)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        serve.zeros(2, 3, requires_grad=True).t().view(6)
    assert x.reshape(6).shape == (6,)  # reshape copies instead


def test_view_errors():
    x = serve.zeros(2, 3)
    with pytest.raises(RuntimeError, match=r"shape '\[2, 5\]' is invalid for input of size 6"):
        x.view(2, 5)
    with pytest.raises(RuntimeError, match=r"shape '\[4, -1\]' is invalid for input of size 6"):
        x.reshape(4, -1)
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        x.view(-1, -1)
    with pytest.raises(RuntimeError, match="invalid shape dimension -2"):
        x.view(-2, 3)


def test_view_zero_size():
    x = serve.zeros(0, 3)
    assert x.view(-1, 3).shape == (0, 3)
    assert x.reshape(3, 0).shape == (3, 0)


# ---- transpose / permute / t / movedim ----------------------------------------------------------------
@pytest.mark.parametrize(
    "fn",
    [
        lambda lib, x: x.transpose(0, 2),
        lambda lib, x: x.transpose(-1, 0),
        lambda lib, x: lib.transpose(x, 1, 2),
        lambda lib, x: x.swapaxes(0, 1),
        lambda lib, x: x.permute(1, 0, 2),
        lambda lib, x: x.permute((2, 0, 1)),
        lambda lib, x: x.permute(-1, -3, -2),
        lambda lib, x: lib.permute(x, (1, 2, 0)),
        lambda lib, x: x.movedim(0, 2),
        lambda lib, x: x.movedim((0, 1), (2, 0)),
        lambda lib, x: lib.movedim(x, -1, 0),
        lambda lib, x: x.mT,
    ],
)
def test_transpose_permute(fn):
    check_op([(2, 3, 4)], fn)


@pytest.mark.filterwarnings("ignore:.*(is deprecated|to reverse their shape).*")
@pytest.mark.parametrize("shape", [(2, 3), (3,), ()])
def test_t(shape):
    check_op([shape], lambda lib, x: x.t())
    check_op([shape], lambda lib, x: x.T)


def test_t_errors_and_view():
    with pytest.raises(RuntimeError, match="expects a tensor with <= 2 dimensions, but self is 3D"):
        serve.zeros(2, 3, 4).t()
    x = serve.zeros(2, 3)
    x.t()[0, 1] = 5.0
    assert x[1, 0].item() == 5.0
    assert x.transpose(0, 1).stride() == (1, 3)


def test_permute_errors():
    x = serve.zeros(2, 3)
    with pytest.raises(RuntimeError, match="duplicate dims"):
        x.permute(0, 0)
    with pytest.raises(RuntimeError, match="number of dimensions"):
        x.permute(0)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.permute(0, 2)
    with pytest.raises(IndexError, match=r"range of \[-2, 1\], but got 5"):
        x.transpose(0, 5)


# ---- squeeze / unsqueeze / flatten / unflatten ---------------------------------------------------------
@pytest.mark.parametrize(
    "fn",
    [
        lambda lib, x: x.squeeze(),
        lambda lib, x: x.squeeze(0),
        lambda lib, x: x.squeeze(1),  # not size 1: unchanged
        lambda lib, x: x.squeeze(-1),
        lambda lib, x: x.squeeze((0, 3)),
        lambda lib, x: lib.squeeze(x, 2),
        lambda lib, x: x.unsqueeze(0),
        lambda lib, x: x.unsqueeze(-1),
        lambda lib, x: x.unsqueeze(-3),
        lambda lib, x: lib.unsqueeze(x, 4),
        lambda lib, x: x.flatten(),
        lambda lib, x: x.flatten(1),
        lambda lib, x: x.flatten(1, 2),
        lambda lib, x: lib.flatten(x, -2, -1),
        lambda lib, x: x.flatten(0, 1).unflatten(0, (3, 1)),
        lambda lib, x: x.unflatten(1, (-1, 1)),
    ],
)
def test_squeeze_unsqueeze_flatten(fn):
    check_op([(1, 3, 2, 1)], fn)


def test_squeeze_0d_and_errors():
    check_op([()], lambda lib, x: x.squeeze())
    check_op([()], lambda lib, x: x.squeeze(0))
    check_op([()], lambda lib, x: x.unsqueeze(0))
    check_op([()], lambda lib, x: x.flatten())
    with pytest.raises(IndexError, match="Dimension out of range"):
        serve.zeros(2, 3).unsqueeze(3)
    with pytest.raises(IndexError, match="Dimension out of range"):
        serve.zeros(2, 3).squeeze(2)
    with pytest.raises(RuntimeError, match="start_dim cannot come after end_dim"):
        serve.zeros(2, 3, 4).flatten(2, 1)
    with pytest.raises(RuntimeError, match=r"sizes \[2, 2\] don't multiply up to the size of dim 1 \(3\)"):
        serve.zeros(2, 3).unflatten(1, (2, 2))


def test_squeeze_unsqueeze_inplace():
    x = serve.zeros(1, 3)
    assert x.squeeze_() is x and x.shape == (3,)
    assert x.unsqueeze_(1) is x and x.shape == (3, 1)


# ---- expand / repeat ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fn",
    [
        lambda lib, x: x.expand(4, 3, 2),
        lambda lib, x: x.expand(2, 4, -1, 2),
        lambda lib, x: x.expand((3, 3, 2)),
        lambda lib, x: x.expand_as(lib.zeros(5, 3, 2)),
        lambda lib, x: lib.broadcast_to(x, (2, 3, 2)),
        lambda lib, x: x.repeat(2, 1, 3),
        lambda lib, x: x.repeat(2, 2, 1, 1),
        lambda lib, x: x.repeat((1, 1, 1)),
    ],
)
def test_expand_repeat(fn):
    check_op([(1, 3, 2)], fn)


def test_expand_is_a_view_and_errors():
    x = serve.tensor([[1.0], [2.0]])
    e = x.expand(2, 3)
    assert e.stride() == (1, 0)
    x[0, 0] = 9.0
    assert e[0].tolist() == [9.0, 9.0, 9.0]
    with pytest.raises(
        RuntimeError,
        match=r"expanded size of the tensor \(4\) must match the existing size \(2\) at non-singleton dimension 0",
    ):
        x.expand(4, 3)
    with pytest.raises(RuntimeError, match=r"number of sizes provided \(1\) must be greater or equal"):
        x.expand(3)
    with pytest.raises(RuntimeError, match="Number of dimensions of repeat dims"):
        x.repeat(2)
    with pytest.raises(RuntimeError, match="expanded size"):
        x.expand_as(serve.zeros(3, 3))


@needs_torch
def test_expand_error_message_matches_torch():
    with pytest.raises(RuntimeError) as ours:
        serve.zeros(2, 1).expand(3, 4)
    with pytest.raises(RuntimeError) as ref:
        torch.zeros(2, 1).expand(3, 4)
    assert str(ours.value) == str(ref.value)


# ---- cat / stack ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fn",
    [
        lambda lib, x, y: lib.cat([x, y]),
        lambda lib, x, y: lib.cat((x, y, x), dim=0),
        lambda lib, x, y: lib.cat([x.t(), y.t()], 1),
        lambda lib, x, y: lib.cat([x, y], -2),
        lambda lib, x, y: lib.stack([x, x]),
        lambda lib, x, y: lib.stack([y, y, y], 1),
        lambda lib, x, y: lib.stack([x, x], -1),
        lambda lib, x, y: lib.hstack([x.t(), y.t()]),
        lambda lib, x, y: lib.vstack([x, y]),
    ],
)
def test_cat_stack(fn):
    check_op([(2, 3), (4, 3)], fn)


@needs_torch
@pytest.mark.parametrize(
    "a,b",
    [("int64", "float32"), ("int32", "int64"), ("bool", "int32"), ("float16", "float32"), ("bool", "bool"),
     ("uint8", "int8"), ("float16", "bfloat16")],
)  # fmt: skip
def test_cat_dtype_promotion(a, b):
    x = serve.ones(2, dtype=getattr(serve, a))
    y = serve.ones(3, dtype=getattr(serve, b))
    ref = torch.cat([torch.ones(2, dtype=getattr(torch, a)), torch.ones(3, dtype=getattr(torch, b))])
    assert_close(serve.cat([x, y]), ref)


def test_cat_legacy_empty_and_gradient_of_promoted():
    x = serve.ones(2, 3)
    assert serve.cat([x, serve.zeros(0)]).shape == (2, 3)
    a = serve.ones(2, requires_grad=True)
    out = serve.cat([a, serve.tensor([1, 2])])
    assert out.dtype == serve.float32
    out.sum().backward()
    assert a.grad.tolist() == [1.0, 1.0]


def test_cat_stack_errors():
    with pytest.raises(
        RuntimeError,
        match=r"Sizes of tensors must match except in dimension 0. Expected size 3 but got size 4 for tensor number 1",
    ):
        serve.cat([serve.zeros(2, 3), serve.zeros(2, 4)])
    with pytest.raises(RuntimeError, match="same number of dimensions: got 2 and 1"):
        serve.cat([serve.zeros(2, 3), serve.zeros(3)])
    with pytest.raises(RuntimeError, match="non-empty"):
        serve.cat([])
    with pytest.raises(IndexError, match="Dimension out of range"):
        serve.cat([serve.zeros(2, 3)], dim=2)
    with pytest.raises(
        RuntimeError,
        match=r"stack expects each tensor to be equal size, but got \[2, 3\] at entry 0 and \[3\] at entry 1",
    ):
        serve.stack([serve.zeros(2, 3), serve.zeros(3)])
    with pytest.raises(RuntimeError, match="stack expects a non-empty TensorList"):
        serve.stack([])


# ---- chunk / split / unbind / narrow / index_select ------------------------------------------------------
@pytest.mark.parametrize(
    "fn",
    [
        lambda lib, x: x.chunk(2),
        lambda lib, x: x.chunk(3, 1),
        lambda lib, x: lib.chunk(x, 4, dim=-1),
        lambda lib, x: x.split(2),
        lambda lib, x: x.split(4, dim=1),
        lambda lib, x: x.split([1, 4], 1),
        lambda lib, x: lib.split(x, [2, 1], 0),
        lambda lib, x: x.unbind(),
        lambda lib, x: x.unbind(1),
        lambda lib, x: lib.unbind(x, -1),
        lambda lib, x: x.narrow(1, 1, 3),
        lambda lib, x: lib.narrow(x, 0, -2, 2),
        lambda lib, x: x.tensor_split(2, 1),
    ],
)
def test_chunk_split_unbind_narrow(fn):
    check_op([(3, 5)], fn)


def test_chunk_counts():
    for size, chunks in [(5, 3), (6, 4), (1, 3), (7, 7), (0, 2)]:
        ours = [c.shape[0] for c in serve.zeros(size).chunk(chunks)]
        if torch is not None:
            assert ours == [c.shape[0] for c in torch.zeros(size).chunk(chunks)]
        assert sum(ours) == size


def test_split_views_and_errors():
    x = serve.zeros(4, 2)
    a, _b = x.split(2)
    a[0, 0] = 1.0
    assert x[0, 0].item() == 1.0
    with pytest.raises(
        RuntimeError, match=r"split_with_sizes expects split_sizes to sum exactly to 4.*split_sizes=\[1, 2\]"
    ):
        x.split([1, 2])
    with pytest.raises(RuntimeError, match="chunk expects `chunks` to be greater than 0, got: 0"):
        x.chunk(0)
    with pytest.raises(RuntimeError, match=r"start \(3\) \+ length \(2\) exceeds dimension size \(4\)"):
        x.narrow(0, 3, 2)


@pytest.mark.parametrize(
    "fn",
    [
        lambda lib, x: x.index_select(0, lib.tensor([2, 0, 2])),
        lambda lib, x: x.index_select(1, lib.tensor([3, 1], dtype=lib.int32)),
        lambda lib, x: lib.index_select(x, -1, lib.tensor([0])),
        lambda lib, x: x.index_select(0, lib.tensor(1)),
    ],
)
def test_index_select(fn):
    check_op([(3, 4)], fn)


def test_index_select_errors():
    x = serve.zeros(3, 4)
    with pytest.raises(RuntimeError, match="Expected dtype int32/int64 for index"):
        x.index_select(0, serve.tensor([0.0]))
    with pytest.raises(IndexError, match="Index is supposed to be a vector"):
        x.index_select(0, serve.tensor([[0]]))
    with pytest.raises(IndexError, match="out of"):
        x.index_select(0, serve.tensor([3]))


# ---- roll / flip / tril / triu ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fn",
    [
        lambda lib, x: x.roll(1),
        lambda lib, x: x.roll(-2, 1),
        lambda lib, x: x.roll((1, 2), (0, 1)),
        lambda lib, x: lib.roll(x, 5, 0),
        lambda lib, x: x.flip(0),
        lambda lib, x: x.flip(0, 1),
        lambda lib, x: lib.flip(x, (-1,)),
        lambda lib, x: x.fliplr(),
        lambda lib, x: x.flipud(),
        lambda lib, x: x.tril(),
        lambda lib, x: x.tril(1),
        lambda lib, x: x.tril(-1),
        lambda lib, x: lib.triu(x),
        lambda lib, x: x.triu(2),
        lambda lib, x: x.triu(diagonal=-1),
        lambda lib, x: x.t().triu(),
    ],
)
def test_roll_flip_triangle(fn):
    check_op([(3, 4)], fn)


def test_triangle_batched_and_errors():
    check_op([(2, 3, 3)], lambda lib, x: x.tril(-1))
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        serve.zeros(3).tril()
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        serve.zeros(3, 3).roll((1, 2), 0)


def test_movement_on_int_and_bool():
    check_op([(2, 3)], lambda lib, x: x.t().reshape(-1).flip(0), dtype="int64")
    check_op([(2, 3)], lambda lib, x: lib.cat([x, x], 1).roll(1, 1), dtype="bool")
    check_op([(2, 3)], lambda lib, x: x.triu(), dtype="int32")


def test_chain_gradient_through_views():
    check_op([(4, 6)], lambda lib, x: x.view(2, 2, 6).permute(2, 0, 1)[1:4].reshape(3, -1).t().flip(1).sum(0))


def test_contiguous_and_clone():
    x = serve.arange(6.0).view(2, 3)
    assert x.contiguous() is x
    y = x.t()
    assert not y.is_contiguous()
    c = y.contiguous()
    assert c.is_contiguous() and c.tolist() == y.tolist()
    check_op([(2, 3)], lambda lib, x: x.t().contiguous())
    check_op([(2, 3)], lambda lib, x: x.clone())
    cl = x.clone()
    cl[0, 0] = 100.0
    assert x[0, 0].item() == 0.0
    assert np.shares_memory(x.t().numpy(), x.numpy())
