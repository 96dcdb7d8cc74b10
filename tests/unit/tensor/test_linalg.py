"""Matrix products and einsum against PyTorch: values, gradients, and PyTorch's error messages."""

from __future__ import annotations

import pytest

import serve
from tests.helpers import assert_close, check_op, needs_torch, torch

MATMUL_SHAPES = [
    ((3,), (3,)),
    ((3,), (3, 4)),
    ((2, 3), (3,)),
    ((2, 3), (3, 4)),
    ((5, 2, 3), (5, 3, 4)),
    ((5, 2, 3), (3, 4)),
    ((2, 3), (5, 3, 4)),
    ((2, 1, 2, 3), (5, 3, 4)),
    ((3,), (5, 3, 4)),
    ((5, 2, 3), (3,)),
    ((0, 3), (3, 4)),
    ((2, 0), (0, 4)),
]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul(shapes):
    check_op(list(shapes), lambda lib, a, b: a @ b)
    check_op(list(shapes), lambda lib, a, b: lib.matmul(a, b))


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_matmul_dtypes(dtype):
    tol = 1e-2 if dtype != "float64" else 1e-10
    check_op([(4, 16), (16, 3)], lambda lib, a, b: a @ b, dtype=dtype, atol=tol, rtol=tol, grad_atol=5e-2)


@needs_torch
def test_matmul_ints():
    check_op([(2, 3), (3, 4)], lambda lib, a, b: a @ b, dtype="int64", low=-5, high=5)
    check_op([(3,), (3,)], lambda lib, a, b: a @ b, dtype="int32", low=-5, high=5)


def test_mm_mv_bmm_dot_outer():
    check_op([(2, 3), (3, 4)], lambda lib, a, b: lib.mm(a, b))
    check_op([(2, 3), (3, 4)], lambda lib, a, b: a.mm(b))
    check_op([(2, 3), (3,)], lambda lib, a, b: lib.mv(a, b))
    check_op([(2, 3), (3,)], lambda lib, a, b: a.mv(b))
    check_op([(5, 2, 3), (5, 3, 4)], lambda lib, a, b: lib.bmm(a, b))
    check_op([(5, 2, 3), (5, 3, 4)], lambda lib, a, b: a.bmm(b))
    check_op([(3,), (3,)], lambda lib, a, b: lib.dot(a, b))
    check_op([(3,), (3,)], lambda lib, a, b: a.inner(b))
    check_op([(3,), (4,)], lambda lib, a, b: lib.outer(a, b))
    check_op([(3,), (4,)], lambda lib, a, b: a.ger(b))


@pytest.mark.parametrize(
    "eq,shapes",
    [
        ("ij,jk->ik", [(2, 3), (3, 4)]),
        ("bij,bjk->bik", [(5, 2, 3), (5, 3, 4)]),
        ("i,i->", [(3,), (3,)]),
        ("ij->ji", [(2, 3)]),
        ("ij->", [(2, 3)]),
        ("ij->j", [(2, 3)]),
        ("...ij,...jk->...ik", [(5, 2, 3), (5, 3, 4)]),
        ("...ij,...jk->...ik", [(2, 3), (3, 4)]),
        ("...ij,jk->...ik", [(6, 5, 2, 3), (3, 4)]),
        ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
        ("bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)]),
        ("ij,jk", [(2, 3), (3, 4)]),
        ("ij,kj", [(2, 3), (4, 3)]),
        ("ba,cb", [(2, 3), (4, 2)]),
        ("i,j->ij", [(3,), (4,)]),
        ("ij,ij->ij", [(2, 3), (2, 3)]),
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
        ("bij,jk->bk", [(5, 2, 3), (3, 4)]),
        ("ij,j->i", [(2, 3), (3,)]),
        ("i...->...", [(2, 3, 4)]),
        ("b i j , b j k -> b i k", [(5, 2, 3), (5, 3, 4)]),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_einsum(eq, shapes):
    check_op(shapes, lambda lib, *xs: lib.einsum(eq, *xs))
    check_op(shapes, lambda lib, *xs: lib.einsum(eq, list(xs)), grad=False)


@needs_torch
def test_einsum_repeated_subscripts_forward():
    check_op([(3, 3)], lambda lib, x: lib.einsum("ii->i", x), grad=False)
    check_op([(3, 3)], lambda lib, x: lib.einsum("ii", x), grad=False)


@needs_torch
def test_einsum_half_and_ints():
    check_op(
        [(4, 8), (8, 3)],
        lambda lib, a, b: lib.einsum("ij,jk->ik", a, b),
        dtype="float16",
        atol=1e-2,
        rtol=1e-2,
        grad_atol=5e-2,
    )
    check_op([(4, 8), (8, 3)], lambda lib, a, b: lib.einsum("ij,jk->ik", a, b), dtype="int64", low=-4, high=4)


# ---- errors -------------------------------------------------------------------------------------------
def _raises(exc, match, f):
    with pytest.raises(exc, match=match):
        f(serve)
    if torch is not None:
        with pytest.raises(exc, match=match):
            f(torch)


def test_matmul_shape_mismatch_messages():
    _raises(
        RuntimeError,
        r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)",
        lambda lib: lib.zeros(2, 3) @ lib.zeros(4, 5),
    )
    _raises(
        RuntimeError,
        r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)",
        lambda lib: lib.mm(lib.zeros(2, 3), lib.zeros(4, 5)),
    )
    _raises(RuntimeError, r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)",
            lambda lib: lib.zeros(2, 3, requires_grad=True) @ lib.zeros(4, 5))  # fmt: skip
    _raises(
        RuntimeError,
        r"inconsistent tensor size, expected tensor \[3\] and src \[4\]",
        lambda lib: lib.zeros(3) @ lib.zeros(4),
    )
    _raises(
        RuntimeError,
        r"size mismatch, got input \(2\), mat \(2x3\), vec \(4\)",
        lambda lib: lib.mv(lib.zeros(2, 3), lib.zeros(4)),
    )
    _raises(RuntimeError, r"Expected size for first two dimensions of batch2 tensor to be: \[5, 3\] but got: \[5, 4\]",
            lambda lib: lib.bmm(lib.zeros(5, 2, 3), lib.zeros(5, 4, 2)))  # fmt: skip
    _raises(RuntimeError, "both arguments to matmul need to be at least 1D, but they are 0D and 1D",
            lambda lib: lib.matmul(lib.tensor(1.0), lib.zeros(3)))  # fmt: skip


@needs_torch
def test_matmul_vector_matrix_mismatch_messages():
    for a, b in (((3,), (4, 5)), ((2, 3), (4,)), ((5, 2, 3), (5, 4, 2))):
        with pytest.raises(RuntimeError) as theirs:
            torch.zeros(a) @ torch.zeros(b)
        with pytest.raises(RuntimeError) as ours:
            serve.zeros(a) @ serve.zeros(b)
        assert str(ours.value) == str(theirs.value)


def test_matmul_batch_mismatch():
    with pytest.raises(RuntimeError, match=r"\[2\].*\[3\]|must match the size"):
        serve.zeros(2, 2, 3) @ serve.zeros(3, 3, 4)
    with pytest.raises(RuntimeError, match=r"\[2\].*\[3\]|must match the size"):
        serve.zeros(2, 2, 3, requires_grad=True) @ serve.zeros(3, 3, 4)


def test_dtype_mismatch():
    _raises(RuntimeError, "expected m1 and m2 to have the same dtype, but got: float != double",
            lambda lib: lib.mm(lib.zeros(2, 3), lib.zeros(3, 4, dtype=lib.float64)))  # fmt: skip
    with pytest.raises(RuntimeError, match="same dtype"):
        serve.zeros(2, 3) @ serve.zeros(3, 4, dtype=serve.int64)
    with pytest.raises(RuntimeError, match=r"same dtype|expected scalar type"):
        serve.einsum("ij,jk->ik", serve.zeros(2, 3), serve.zeros(3, 4, dtype=serve.float16))


def test_mm_on_3d_and_bmm_on_2d():
    _raises(RuntimeError, "self must be a matrix", lambda lib: lib.mm(lib.zeros(2, 2, 3), lib.zeros(3, 4)))
    _raises(RuntimeError, "mat2 must be a matrix", lambda lib: lib.mm(lib.zeros(2, 3), lib.zeros(1, 3, 4)))
    _raises(RuntimeError, "batch1 must be a 3D tensor", lambda lib: lib.bmm(lib.zeros(2, 3), lib.zeros(1, 3, 4)))
    _raises(RuntimeError, "batch2 must be a 3D tensor", lambda lib: lib.bmm(lib.zeros(1, 2, 3), lib.zeros(3, 4)))
    _raises(
        RuntimeError,
        "1D tensors expected, but got 2D and 1D tensors",
        lambda lib: lib.dot(lib.zeros(2, 3), lib.zeros(3)),
    )


def test_matmul_with_non_tensor():
    with pytest.raises(TypeError):
        serve.zeros(2, 3) @ [[1.0]] * 3


def test_einsum_errors():
    with pytest.raises(RuntimeError, match="einsum"):
        serve.einsum("ij,jk->ik", serve.zeros(2, 3))
    with pytest.raises(
        RuntimeError, match=r"einsum\(\): the number of subscripts in the equation \(2\) does not match"
    ):
        serve.einsum("ij->i", serve.zeros(2, 3, 4))
    with pytest.raises(RuntimeError, match="einsum"):
        serve.einsum("ij,jk->ik", serve.zeros(2, 3), serve.zeros(4, 5))


@needs_torch
def test_matmul_second_order_gradient():
    a = serve.randn(2, 3, requires_grad=True)
    b = serve.randn(3, 4, requires_grad=True)
    ta = torch.tensor(a.detach().numpy(), requires_grad=True)
    tb = torch.tensor(b.detach().numpy(), requires_grad=True)
    for lib, x, y in ((serve, a, b), (torch, ta, tb)):
        out = (x @ y).pow(2).sum()
        ga, gb = lib.autograd.grad(out, (x, y), create_graph=True)
        (ga.sum() + gb.pow(2).sum()).backward()
    assert_close(a.grad, ta.grad, atol=1e-4)
    assert_close(b.grad, tb.grad, atol=1e-4)
