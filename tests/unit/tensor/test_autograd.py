"""Autograd: backward(), autograd.grad, higher-order gradients, custom Functions, leaf rules, in-place ops."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from tests.helpers import assert_close, needs_torch, to_numpy, torch

# ---- the beginner examples -----------------------------------------------------------------------------


class Square(serve.autograd.Function):
    """x * x with a backward written in differentiable ops (so create_graph works through it)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


def test_linear_scalar_example():
    x = serve.tensor(3.0)
    w = serve.tensor(4.0, requires_grad=True)
    b = serve.tensor(5.0, requires_grad=True)
    y = w * x + b
    assert y.item() == 17.0
    y.backward()
    assert w.grad.item() == 3.0
    assert b.grad.item() == 1.0
    assert x.grad is None


def test_mean_of_squares_example():
    x = serve.ones(2, 2, requires_grad=True)
    y = x + 2
    z = y * y * 3
    out = z.mean()
    assert out.item() == 27.0
    out.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 2), 4.5, np.float32))
    assert x.grad.dtype == serve.float32


class MyReLU(serve.autograd.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[input < 0] = 0
        return grad_input


def test_custom_relu_matches_builtin():
    data = np.array([[-1.5, 0.5, 2.0], [3.0, -0.25, -4.0]], np.float32)
    x1 = serve.tensor(data, requires_grad=True)
    x2 = serve.tensor(data, requires_grad=True)
    x3 = serve.tensor(data, requires_grad=True)
    y1 = MyReLU.apply(x1)
    assert y1.grad_fn.name() == "MyReLUBackward"
    assert y1.requires_grad and not y1.is_leaf
    (y1 * serve.arange(6.0).reshape(2, 3)).sum().backward()
    (serve.relu(x2) * serve.arange(6.0).reshape(2, 3)).sum().backward()
    (x3.clamp(min=0) * serve.arange(6.0).reshape(2, 3)).sum().backward()
    np.testing.assert_array_equal(y1.detach().numpy(), np.maximum(data, 0))
    np.testing.assert_array_equal(x1.grad.numpy(), x2.grad.numpy())
    np.testing.assert_array_equal(x1.grad.numpy(), x3.grad.numpy())
    np.testing.assert_array_equal(x1.grad.numpy(), np.arange(6.0).reshape(2, 3) * (data > 0))


def test_custom_function_without_grad_input_returns_plain_tensor():
    x = serve.tensor([-1.0, 2.0])
    y = MyReLU.apply(x)
    assert not y.requires_grad and y.grad_fn is None
    with serve.no_grad():
        y = MyReLU.apply(serve.tensor([-1.0, 2.0], requires_grad=True))
    assert not y.requires_grad and y.grad_fn is None


# ---- backward() ----------------------------------------------------------------------------------------


def test_backward_non_scalar_needs_gradient():
    x = serve.ones(3, requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        y.backward()
    y.backward(serve.tensor([1.0, 0.1, 0.01]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 0.2, 0.02], rtol=1e-6)


def test_backward_one_element_non_scalar_is_implicit():
    x = serve.ones(1, 1, requires_grad=True)
    (x * 3).backward()
    assert x.grad.shape == (1, 1) and x.grad.item() == 3.0


def test_backward_gradient_shape_mismatch_raises():
    x = serve.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * 2).backward(serve.ones(4))


def test_gradients_accumulate():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0])
    x.grad = None
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])
    x.grad.zero_()
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


def test_grad_is_not_aliased_to_upstream_gradient():
    # the first .grad must be a fresh tensor: accumulating into it must not change the caller's gradient
    x = serve.ones(3, requires_grad=True)
    g = serve.tensor([1.0, 2.0, 3.0])
    x.backward(g)
    x.backward(g)
    np.testing.assert_array_equal(g.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])


def test_retain_graph():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.backward()
    x.grad = None
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    expected = 2 * (np.exp([1.0, 2.0]) * (1 + np.array([1.0, 2.0])))
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6)


def test_backward_without_grad_raises():
    x = serve.ones(2)
    with pytest.raises(RuntimeError, match="does not require grad"):
        (x * 2).sum().backward()
    with pytest.raises(RuntimeError, match="does not require grad"):
        x.sum().backward()


def test_backward_on_leaf():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    x.backward(serve.tensor([3.0, 4.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])


def test_backward_inputs_argument():
    x = serve.tensor(2.0, requires_grad=True)
    w = serve.tensor(3.0, requires_grad=True)
    (x * w).backward(inputs=[x])
    assert x.grad.item() == 3.0
    assert w.grad is None


def test_autograd_backward_multiple_roots():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    a, b = x * 2, (x * x).sum()
    serve.autograd.backward([a, b], [serve.ones(2), None])
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 6.0])


def test_unused_leaf_keeps_none_grad():
    x = serve.tensor(1.0, requires_grad=True)
    z = serve.tensor(1.0, requires_grad=True)
    (x * 2).backward()
    assert z.grad is None


# ---- autograd.grad --------------------------------------------------------------------------------------


def test_grad_does_not_touch_dot_grad():
    x = serve.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (g,) = serve.autograd.grad((x**2).sum(), x)
    np.testing.assert_array_equal(g.numpy(), [2.0, 4.0, 6.0])
    assert x.grad is None
    assert not g.requires_grad


def test_grad_multiple_inputs_and_grad_outputs():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    w = serve.tensor([3.0, 5.0], requires_grad=True)
    y = x * w
    gx, gw = serve.autograd.grad(y, [x, w], grad_outputs=serve.tensor([1.0, 10.0]))
    np.testing.assert_array_equal(gx.numpy(), [3.0, 50.0])
    np.testing.assert_array_equal(gw.numpy(), [1.0, 20.0])


def test_grad_non_scalar_without_grad_outputs_raises():
    x = serve.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        serve.autograd.grad(x * 2, x)


def test_grad_retain_graph():
    x = serve.tensor(2.0, requires_grad=True)
    y = x.exp() * x
    serve.autograd.grad(y, x, retain_graph=True)
    (g,) = serve.autograd.grad(y, x)
    assert g.item() == pytest.approx(np.exp(2.0) * 3, rel=1e-6)
    with pytest.raises(RuntimeError, match="retain_graph"):
        serve.autograd.grad(y, x)


def test_grad_allow_unused():
    x = serve.tensor(2.0, requires_grad=True)
    z = serve.tensor(3.0, requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="allow_unused=True"):
        serve.autograd.grad(y, [x, z], retain_graph=True)
    gx, gz = serve.autograd.grad(y, [x, z], allow_unused=True, retain_graph=True)
    assert gx.item() == 2.0 and gz is None
    gx, gz = serve.autograd.grad(y, [x, z], materialize_grads=True)
    assert gz is not None and gz.item() == 0.0


def test_grad_input_not_requiring_grad_raises():
    x = serve.tensor(2.0, requires_grad=True)
    c = serve.tensor(1.0)
    with pytest.raises(RuntimeError, match="does not require grad"):
        serve.autograd.grad(x * c, c)


def test_grad_wrt_intermediate():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    y = (h * h).sum()
    gh, gx = serve.autograd.grad(y, [h, x])
    np.testing.assert_array_equal(gh.numpy(), [6.0, 12.0])
    np.testing.assert_array_equal(gx.numpy(), [18.0, 36.0])


def test_grad_wrt_intermediate_only_does_not_need_leaves():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    h = x.sin()
    (gh,) = serve.autograd.grad((h * 2).sum(), h)
    np.testing.assert_array_equal(gh.numpy(), [2.0, 2.0])
    assert x.grad is None


def test_grad_wrt_intermediate_leaves_graph_below_it_usable():
    # only the nodes between the outputs and the inputs run (and are freed), as in PyTorch
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    h = x.exp()
    serve.autograd.grad((h * h).sum(), h)
    (gx,) = serve.autograd.grad(h.sum(), x)
    np.testing.assert_allclose(gx.numpy(), np.exp([1.0, 2.0]), rtol=1e-6)


def test_backward_inputs_non_leaf_fills_its_grad():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    (y * y).sum().backward(inputs=[y])
    np.testing.assert_array_equal(y.grad.numpy(), [6.0, 12.0])
    assert x.grad is None


def test_second_backward_through_nodes_without_saved_tensors():
    # PyTorch fails a second backward only where a node needs what it saved; neg saves nothing
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    h = x.neg()
    h.sum().backward()
    (h * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [-3.0, -3.0])


def test_retain_grad_under_create_graph_is_differentiable():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    h.retain_grad()
    (h**2).sum().backward(create_graph=True)
    assert h.grad.requires_grad
    np.testing.assert_array_equal(h.grad.detach().numpy(), [6.0, 12.0])


def test_error_messages_name_the_index():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    z = serve.tensor(1.0, requires_grad=True)
    with pytest.raises(RuntimeError, match="element 1 of tensors does not require grad"):
        serve.autograd.backward([x.sum(), serve.ones(1).sum()])
    with pytest.raises(RuntimeError, match="The differentiated Tensor at index 1 appears to not have been used"):
        serve.autograd.grad(x.sum(), [x, z])


def test_grad_wrt_output_itself():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    (g,) = serve.autograd.grad(y, y, grad_outputs=serve.tensor([5.0, 6.0]))
    np.testing.assert_array_equal(g.numpy(), [5.0, 6.0])


@pytest.mark.parametrize(
    "name",
    ["cube", "sin", "exp", "tanh", "sigmoid", "softmax", "log_softmax", "matmul", "mlp", "div", "sqrt", "norm"],
)
@needs_torch
def test_hessian_vector_products_match_torch(name):
    rng = np.random.default_rng(0)
    xa = rng.uniform(0.5, 1.5, (3, 4))
    wa = rng.uniform(-1, 1, (4, 5))
    va = rng.uniform(-1, 1, (3, 4))

    def f(lib, x, w):
        if name == "cube":
            return (x**3).sum()
        if name == "sin":
            return x.sin().sum()
        if name == "exp":
            return x.exp().sum()
        if name == "tanh":
            return (x.tanh() * x).sum()
        if name == "sigmoid":
            return (x.sigmoid() ** 2).sum()
        if name == "softmax":
            return (x.softmax(-1) * lib.arange(4.0, dtype=x.dtype)).sum()
        if name == "log_softmax":
            return (x.log_softmax(-1) * lib.arange(4.0, dtype=x.dtype)).sum()
        if name == "matmul":
            return ((x @ w) ** 2).sum()
        if name == "mlp":
            return ((x @ w).tanh() @ w.mT).sigmoid().sum()
        if name == "div":
            return (1 / x + x / (x + 1)).sum()
        if name == "sqrt":
            return (x.sqrt() * x.log()).sum()
        return x.norm(dim=1).sum()

    results = []
    for lib in (serve, torch):
        x = lib.tensor(xa, requires_grad=True)
        w = lib.tensor(wa, requires_grad=True)
        y = f(lib, x, w)
        gx, _ = lib.autograd.grad(y, [x, w], create_graph=True, allow_unused=True)
        assert gx.requires_grad
        hv = lib.autograd.grad((gx * lib.tensor(va)).sum(), [x, w], allow_unused=True)
        results.append((y, gx, hv))
    (y, gx, hv), (ty, tgx, thv) = results
    assert_close(y, ty, atol=1e-10, rtol=1e-10)
    assert_close(gx, tgx, atol=1e-10, rtol=1e-9)
    for a, b in zip(hv, thv):
        if b is None:
            assert a is None or not to_numpy(a).any()
        else:
            assert a is not None
            assert_close(a, b, atol=1e-10, rtol=1e-9)


_IDX = np.array([[0, 2, 1, 3], [1, 1, 0, 2], [3, 0, 0, 1]])
_SECOND_ORDER = {
    "relu": lambda lib, x: (x.relu() * x).sum(),
    "abs": lambda lib, x: (x.abs() * x * x).sum(),
    "where": lambda lib, x: lib.where(x > 0, x * x, x.sin()).sum(),
    "amax": lambda lib, x: (x.amax(1) ** 2).sum(),
    "max_dim": lambda lib, x: (x.max(1).values ** 2).sum(),
    "index": lambda lib, x: (x[:, 1:3] ** 3).sum() + (x[[0, 2]] ** 2).sum(),
    "gather": lambda lib, x: (x.gather(1, lib.tensor(_IDX)) ** 3).sum(),
    "cat": lambda lib, x: (lib.cat([x, x * x], 0) ** 2).sum(),
    "pow_tensor": lambda lib, x: (x.abs() + 0.5).pow(x).sum(),
    "prod": lambda lib, x: (x.prod(1) * x.sum(1)).sum() + x.prod(),
    "prod_with_zero": lambda lib, x: ((x * (x > -1.4)).prod(0) ** 2).sum(),
    "cumsum": lambda lib, x: (x.cumsum(1) ** 2).sum(),
    "erf": lambda lib, x: x.erf().sum(),
    "rsqrt": lambda lib, x: (x * x + 1).rsqrt().sum(),
    "transpose_mm": lambda lib, x: (x.t() @ x).pow(2).sum(),
    "expand": lambda lib, x: (x[:, :1].expand(3, 4) * x).pow(2).sum(),
    "maximum": lambda lib, x: (lib.maximum(x, x.flip(0)) ** 2).sum(),
    "einsum": lambda lib, x: lib.einsum("ij,kj->ik", x, x).pow(2).sum(),
    "var": lambda lib, x: x.var(1).sum(),
    "clamp": lambda lib, x: (x.clamp(-0.5, 0.5) * x).sum(),
    "triu": lambda lib, x: (x.triu() ** 3).sum(),
    "normalize": lambda lib, x: (x - x.mean(1, keepdim=True)).pow(2).mean() + x.std(),
}


@needs_torch
@pytest.mark.parametrize("name", sorted(_SECOND_ORDER))
def test_second_order_matches_torch(name):
    rng = np.random.default_rng(0)
    xa, va = rng.uniform(-1.5, 1.5, (3, 4)), rng.uniform(-1, 1, (3, 4))
    res = []
    for lib in (serve, torch):
        x = lib.tensor(xa, requires_grad=True)
        (g,) = lib.autograd.grad(_SECOND_ORDER[name](lib, x), x, create_graph=True)
        (h,) = lib.autograd.grad((g * lib.tensor(va)).sum(), x, allow_unused=True)
        res.append((g, lib.zeros_like(x) if h is None else h))
    for a, b in zip(*res):
        assert_close(a, b, atol=1e-10, rtol=1e-9)


def test_second_derivatives_closed_form():
    x = serve.tensor([0.5, 1.0, 2.0], dtype=serve.float64, requires_grad=True)
    (g,) = serve.autograd.grad((x**3).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), 3 * x.detach().numpy() ** 2)
    (h,) = serve.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), 6 * x.detach().numpy())
    (g,) = serve.autograd.grad(x.sin().sum(), x, create_graph=True)
    (h,) = serve.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), -np.sin(x.detach().numpy()))
    (g,) = serve.autograd.grad(x.exp().sum(), x, create_graph=True)
    (h,) = serve.autograd.grad(g.sum(), x, create_graph=True)
    (h3,) = serve.autograd.grad(h.sum(), x)
    np.testing.assert_allclose(h3.numpy(), np.exp(x.detach().numpy()))


def test_backward_create_graph_then_backward_again():
    x = serve.tensor(3.0, dtype=serve.float64, requires_grad=True)
    (x**3).backward(create_graph=True)
    assert x.grad.requires_grad
    g = x.grad
    x.grad = None
    g.backward()
    assert x.grad.item() == pytest.approx(18.0)


def test_third_derivative_of_cube():
    x = serve.tensor(2.0, requires_grad=True)
    y = x**3
    (d1,) = serve.autograd.grad(y, x, create_graph=True)
    (d2,) = serve.autograd.grad(d1, x, create_graph=True)
    (d3,) = serve.autograd.grad(d2, x)
    assert (d1.item(), d2.item(), d3.item()) == (12.0, 12.0, 6.0)


# ---- grad mode interplay ------------------------------------------------------------------------------


def test_no_grad_results_do_not_record():
    x = serve.ones(2, requires_grad=True)
    with serve.no_grad():
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None and y.is_leaf
    z = x * 2
    assert z.requires_grad and z.grad_fn is not None


# ---- leaf rules ------------------------------------------------------------------------------------------


def test_is_leaf_and_requires_grad():
    a = serve.rand(3)
    assert a.is_leaf and not a.requires_grad
    b = serve.rand(3, requires_grad=True)
    assert b.is_leaf and b.requires_grad and b.grad_fn is None
    c = b * 2
    assert not c.is_leaf and c.requires_grad
    d = a * 2
    assert d.is_leaf and not d.requires_grad
    e = b.detach()
    assert e.is_leaf and not e.requires_grad


def test_requires_grad_rules():
    a = serve.tensor([1.0, 2.0])
    assert a.requires_grad_() is a and a.requires_grad
    a.requires_grad = False
    assert not a.requires_grad
    with pytest.raises(RuntimeError, match="floating point and complex dtype can require gradients"):
        serve.tensor([1, 2]).requires_grad_()
    with pytest.raises(RuntimeError, match="floating point and complex dtype can require gradients"):
        serve.tensor([1, 2], requires_grad=True)
    serve.tensor([1, 2]).requires_grad_(False)  # allowed
    y = serve.ones(2, requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf variables"):
        y.requires_grad = False
    y.requires_grad_(True)  # a no-op on a non-leaf that requires grad


def test_detach_shares_memory_and_cuts_graph():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None
    d[0] = 10.0
    assert y[0].item() == 10.0
    z = (y * d).sum()  # d is a constant
    z.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [20.0, 8.0])


def test_retain_grad_on_intermediate():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    assert y.retains_grad
    z = y * 2
    (z * z).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [16.0, 32.0])
    assert z.grad is None


def test_retain_grad_accumulates():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    s = y.sum()
    s.backward(retain_graph=True)
    s.backward()
    np.testing.assert_array_equal(y.grad.numpy(), [2.0, 2.0])


def test_inplace_on_leaf_requiring_grad_raises():
    x = serve.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad is being used in an in-place operation"):
        x.add_(1)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x.mul_(2)
    with serve.no_grad():
        x.add_(1)
    np.testing.assert_array_equal(x.detach().numpy(), [2.0, 2.0])
    assert x.is_leaf and x.requires_grad


@needs_torch
@pytest.mark.parametrize("case", range(6))
def test_inplace_on_non_leaf_matches_torch(case):
    def f(lib, x, w):
        if case == 0:
            y = x * 2
            y.add_(1)
            y.mul_(w)
            z = y * y  # torch rejects y.mul_(y) itself: Mul saved the y it then overwrites
            return z.sum()
        if case == 1:
            y = x.clone()
            y += w
            y *= x
            return (y * y).sum()
        if case == 2:
            y = x.sin()
            y.sub_(w).div_(2).exp_()
            return y.sum()
        if case == 3:
            y = x * 1
            y[0] = w[0] * 3
            return (y * y).sum()
        if case == 4:
            y = x.clone()
            y.mul_(w)
            y.tanh_()
            return y.sum()
        y = x * 3
        y.copy_(w * 2)
        return (y * x).sum()

    xa = np.array([0.5, -1.0, 2.0])
    wa = np.array([1.5, 0.25, -0.5])
    outs = []
    for lib in (serve, torch):
        x, w = lib.tensor(xa, requires_grad=True), lib.tensor(wa, requires_grad=True)
        y = f(lib, x, w)
        y.backward()
        outs.append((y, x.grad, w.grad))
    for a, b in zip(*outs):
        assert_close(a, b, atol=1e-12)


def test_inplace_on_non_leaf_keeps_requires_grad_and_rebases():
    x = serve.ones(2, requires_grad=True)
    y = x * 2
    before = y.grad_fn
    y.add_(1)
    assert not y.is_leaf and y.grad_fn is not before
    assert y.grad_fn.name() == "AddBackward0"


def test_grad_fn_names():
    x = serve.ones(2, requires_grad=True)
    assert (x + 1).grad_fn.name() == "AddBackward0"
    assert (x * 2).grad_fn.name() == "MulBackward0"
    assert "MulBackward0" in repr((x * 2).grad_fn)
    assert MyReLU.apply(x).grad_fn.name() == "MyReLUBackward"
    assert type(MyReLU.apply(x).grad_fn).__name__ is not None


def test_next_functions():
    x = serve.ones(2, requires_grad=True)
    y = (x * 2) + x
    nf = y.grad_fn.next_functions
    assert len(nf) == 2
    assert nf[0][0].name() == "MulBackward0"


# ---- custom Functions -----------------------------------------------------------------------------------


class ScaleShift(serve.autograd.Function):
    """y = x * scale + b, with a Python float `scale` (no gradient)."""

    @staticmethod
    def forward(ctx, x, scale, b):
        ctx.scale = scale
        ctx.save_for_backward(x, b)
        return x * scale + b

    @staticmethod
    def backward(ctx, g):
        gx = g * ctx.scale if ctx.needs_input_grad[0] else None
        gb = g.sum(0) if ctx.needs_input_grad[2] else None
        return gx, None, gb


def test_custom_function_non_tensor_args():
    x = serve.ones(3, 2, requires_grad=True)
    b = serve.tensor([1.0, 2.0], requires_grad=True)
    y = ScaleShift.apply(x, 2.5, b)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((3, 2), 2.5))
    np.testing.assert_array_equal(b.grad.numpy(), [3.0, 3.0])


def test_custom_function_needs_input_grad():
    seen = []

    class Probe(serve.autograd.Function):
        @staticmethod
        def forward(ctx, a, k, b):
            seen.append(ctx.needs_input_grad)
            return a * b

        @staticmethod
        def backward(ctx, g):
            seen.append(ctx.needs_input_grad)
            return g, None, g

    a = serve.ones(2, requires_grad=True)
    b = serve.ones(2)
    Probe.apply(a, 3, b).sum().backward()
    assert seen == [(True, False, False), (True, False, False)]


class SplitTwo(serve.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2, x * x

    @staticmethod
    def backward(ctx, g1, g2):
        (x,) = ctx.saved_tensors
        return g1 * 2 + g2 * 2 * x


def test_custom_function_multiple_outputs():
    x = serve.tensor([1.0, 3.0], requires_grad=True)
    a, b = SplitTwo.apply(x)
    assert a.grad_fn is b.grad_fn and (a.output_nr, b.output_nr) == (0, 1)
    (a.sum() + b.sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0])


def test_custom_function_multiple_outputs_one_used_gets_zero_grad():
    x = serve.tensor([1.0, 3.0], requires_grad=True)
    _, b = SplitTwo.apply(x)
    b.sum().backward()  # g1 is materialized as zeros
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 6.0])


def test_mark_non_differentiable():
    class SortWithIndex(serve.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            values, idx = x.sort()
            ctx.mark_non_differentiable(idx)
            ctx.save_for_backward(idx)
            return values, idx

        @staticmethod
        def backward(ctx, g, g_idx):
            (idx,) = ctx.saved_tensors
            out = serve.zeros_like(g)
            out[idx] = g
            return out

    x = serve.tensor([3.0, 1.0, 2.0], requires_grad=True)
    v, i = SortWithIndex.apply(x)
    assert v.requires_grad and not i.requires_grad and i.grad_fn is None
    (v * serve.tensor([1.0, 10.0, 100.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [100.0, 1.0, 10.0])


def test_custom_function_wrong_number_of_gradients():
    class Bad(serve.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return g

    x = serve.ones(2, requires_grad=True)
    message = r"function BadBackward returned an incorrect number of gradients \(expected 2, got 1\)"
    with pytest.raises(RuntimeError, match=message):
        Bad.apply(x, x).sum().backward()


def test_custom_function_extra_none_gradients_are_fine():
    class Extra(serve.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2, None

    x = serve.ones(2, requires_grad=True)
    Extra.apply(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_custom_function_wrong_gradient_shape():
    class BadShape(serve.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return serve.ones(5)

    x = serve.ones(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"Function BadShapeBackward returned an invalid gradient at index 0"):
        BadShape.apply(x).sum().backward()


def test_setup_context_style():
    class Cube(serve.autograd.Function):
        @staticmethod
        def forward(x, k):
            return x**3 * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, k = inputs
            ctx.save_for_backward(x)
            ctx.k = k

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x**2 * ctx.k, None

    x = serve.tensor([1.0, 2.0], requires_grad=True)
    y = Cube.apply(x, 2.0)
    np.testing.assert_array_equal(y.detach().numpy(), [2.0, 16.0])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 24.0])


def test_custom_function_double_backward():
    # backward written with differentiable ops: create_graph gives a second derivative through it
    x = serve.tensor([1.0, 3.0], requires_grad=True)
    (g,) = serve.autograd.grad(Square.apply(x).sum(), x, create_graph=True)
    np.testing.assert_array_equal(g.detach().numpy(), [2.0, 6.0])
    assert g.requires_grad
    (h,) = serve.autograd.grad(g.sum(), x)
    np.testing.assert_array_equal(h.numpy(), [2.0, 2.0])


class SavesOutputExp(serve.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y


def test_custom_function_saved_output_is_differentiable():
    # a saved output is the returned tensor, on the graph: the second derivative goes through it
    x = serve.tensor([0.0, 1.0], dtype=serve.float64, requires_grad=True)
    (g,) = serve.autograd.grad(SavesOutputExp.apply(x).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), np.exp([0.0, 1.0]))
    (h,) = serve.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), np.exp([0.0, 1.0]))


def test_once_differentiable_under_create_graph():
    from serve.autograd.function import once_differentiable

    class OnceExp(serve.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            assert not serve.is_grad_enabled()
            (y,) = ctx.saved_tensors
            return g * y

    x = serve.tensor([0.0, 1.0], requires_grad=True)
    OnceExp.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([0.0, 1.0]), rtol=1e-6)
    # create_graph with a gradient that requires grad: the result is marked, differentiating it raises
    (g,) = serve.autograd.grad((OnceExp.apply(x) ** 2).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), 2 * np.exp([0.0, 2.0]), rtol=1e-6)
    assert g.requires_grad and g.grad_fn.name() == "Error"
    with pytest.raises(RuntimeError, match="trying to differentiate twice a function that was marked with @once_diff"):
        g.sum().backward()


def test_custom_function_saved_tensors_freed_after_backward():
    x = serve.ones(2, requires_grad=True)
    y = MyReLU.apply(x)
    y.sum().backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.grad_fn.saved_tensors


def test_custom_function_returning_input_view_and_constants():
    class Identity(serve.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 3

    x = serve.ones(2, requires_grad=True)
    y = Identity.apply(x)
    assert not y.is_leaf and x.is_leaf and x.grad_fn is None
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


def test_custom_function_backward_returns_tuple_of_one():
    class T(serve.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return (g * 2,)

    x = serve.ones(2, requires_grad=True)
    T.apply(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


# ---- graph shapes ----------------------------------------------------------------------------------------


def test_diamond_graph():
    x = serve.tensor(2.0, requires_grad=True)
    a = x * 3
    b = x.exp()
    y = a * b + a
    y.backward()
    assert x.grad.item() == pytest.approx(3 * np.exp(2.0) + 6 * np.exp(2.0) + 3, rel=1e-6)


def test_shared_subexpression_used_many_times():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    s = x * x
    y = (s + s + s * s).sum()
    y.backward()
    xv = np.array([1.0, 2.0])
    np.testing.assert_allclose(x.grad.numpy(), 4 * xv + 4 * xv**3)


def test_long_chain_no_recursion_limit():
    x = serve.tensor(1.0, requires_grad=True)
    y = x
    for _ in range(3000):
        y = y * 1.0001
    y.backward()
    assert x.grad.item() == pytest.approx(1.0001**3000, rel=1e-4)


def test_long_chain_create_graph():
    x = serve.tensor(1.0, dtype=serve.float64, requires_grad=True)
    y = x
    for _ in range(1000):
        y = y + x * 0.001
    (g,) = serve.autograd.grad(y * y, x, create_graph=True)
    (h,) = serve.autograd.grad(g, x)
    assert h.item() == pytest.approx(2 * 2.0**2, rel=1e-9)


def test_dtype_of_gradients():
    x64 = serve.tensor([1.0, 2.0], dtype=serve.float64, requires_grad=True)
    (x64 * 3).sum().backward()
    assert x64.grad.dtype == serve.float64
    x32 = serve.tensor([1.0, 2.0], dtype=serve.float32, requires_grad=True)
    y64 = serve.tensor([3.0, 4.0], dtype=serve.float64, requires_grad=True)
    z = x32 * y64
    assert z.dtype == serve.float64
    z.sum().backward()
    assert x32.grad.dtype == serve.float32 and y64.grad.dtype == serve.float64
    np.testing.assert_array_equal(x32.grad.numpy(), [3.0, 4.0])
    np.testing.assert_array_equal(y64.grad.numpy(), [1.0, 2.0])


def test_dtype_of_gradients_through_cast():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    x.double().sum().backward()
    assert x.grad.dtype == serve.float32


def test_broadcast_gradients_reduce_to_input_shape():
    x = serve.ones(3, 1, requires_grad=True)
    b = serve.ones(4, requires_grad=True)
    (x + b).sum().backward()
    assert x.grad.shape == (3, 1) and b.grad.shape == (4,)
    np.testing.assert_array_equal(x.grad.numpy(), np.full((3, 1), 4.0))
    np.testing.assert_array_equal(b.grad.numpy(), np.full(4, 3.0))


@needs_torch
def test_mlp_training_step_matches_torch():
    rng = np.random.default_rng(1)
    xa, w1a, w2a = rng.normal(size=(5, 4)), rng.normal(size=(4, 6)), rng.normal(size=(6, 3))
    res = []
    for lib in (serve, torch):
        x = lib.tensor(xa, dtype=lib.float32)
        w1 = lib.tensor(w1a, dtype=lib.float32, requires_grad=True)
        w2 = lib.tensor(w2a, dtype=lib.float32, requires_grad=True)
        h = (x @ w1).relu()
        logits = h @ w2
        loss = -(logits.log_softmax(-1)[:, 0]).mean()
        loss.backward()
        res.append((loss, w1.grad, w2.grad))
    for a, b in zip(*res):
        assert_close(a, b, atol=1e-5)


def test_second_backward_through_nodes_that_save_only_shapes():
    # PyTorch's AddBackward/SumBackward/ExpandBackward save no tensors, so a second backward needs no retain_graph
    x = serve.randn(3, requires_grad=True)
    y = (x + 1).reshape(3, 1).expand(3, 2)
    y.sum().backward()
    y.sum().backward()
    assert x.grad.tolist() == [4.0, 4.0, 4.0]
    z = x * x
    z.sum().backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        z.sum().backward()


def test_modifying_a_saved_tensor_in_place_raises_like_pytorch():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()  # ExpBackward saves its output
    y.add_(1)
    with pytest.raises(
        RuntimeError, match=r"modified by an inplace operation.*ExpBackward0.*version 1; expected version 0"
    ):
        y.sum().backward()


def test_in_place_after_use_is_fine_when_nothing_saved_it():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2  # MulBackward saves x and the scalar, not y
    y.add_(1)
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
    a = serve.tensor([1.0, -1.0], requires_grad=True)
    b = a.clone()
    out = serve.where(a > 0, b, serve.zeros(2))  # where saves only its condition
    b.mul_(3)
    out.sum().backward()
    assert a.grad.tolist() == [1.0, 0.0]  # what PyTorch gives: out took b before the in-place change


def test_writes_through_a_view_bump_the_base_version():
    x = serve.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x.sigmoid()
    y[1:].zero_()  # a view of y's storage
    with pytest.raises(RuntimeError, match="SigmoidBackward0"):
        y.sum().backward()


def test_custom_function_saved_tensor_modified_in_place_raises():
    x = serve.tensor([1.0, 2.0], requires_grad=True)
    h = x + 0
    out = Square.apply(h)
    h.mul_(5)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
