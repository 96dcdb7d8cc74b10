"""Normalization against PyTorch: functional ops (values, input/parameter gradients, no-grad fast paths), running
statistics over several training steps, eval mode, module state_dicts, reprs and errors."""

import numpy as np
import pytest

import serve
from serve import nn
from tests.helpers import assert_close, check_op, needs_torch, torch

TOL = {"rtol": 1e-5, "atol": 1e-5}
F = serve.nn.functional


def _pair(shape, seed=0, scale=1.0, shift=0.0):
    x = (np.random.default_rng(seed).normal(size=shape) * scale + shift).astype(np.float32)
    return serve.tensor(x), torch.tensor(x)


# ---- layer norm ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("shapes", "normalized"),
    [([(2, 3, 8), (8,), (8,)], (8,)), ([(2, 3, 8), (3, 8), (3, 8)], (3, 8)), ([(4, 6)], (6,)), ([(4, 6), (6,)], [6])],
)
def test_layer_norm(shapes, normalized):
    check_op(shapes, lambda lib, x, *wb: lib.nn.functional.layer_norm(x, normalized, *wb), **TOL)
    check_op(shapes, lambda lib, x, *wb: lib.nn.functional.layer_norm(x, normalized, *wb, eps=1e-3), grad=False, **TOL)


def test_layer_norm_second_derivative():
    def grad_of_grad(lib, x, w):
        y = (lib.nn.functional.layer_norm(x, (5,), w) ** 3).sum()
        gx, gw = lib.autograd.grad(y, (x, w), create_graph=True)
        return gx * 1.0, gw * 1.0

    check_op([(3, 5), (5,)], grad_of_grad, fd=False, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_layer_norm_half(dtype):
    tol = 1e-2 if dtype == "bfloat16" else 2e-3
    check_op([(4, 32), (32,), (32,)], lambda lib, x, w, b: lib.nn.functional.layer_norm(x, (32,), w, b),
             dtype=dtype, grad=False, atol=tol, rtol=tol)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (((2, 5), (4,)), r"Given normalized_shape=\[4\], expected input with shape \[\*, 4\]"),
        (((2, 4), (4,), (3,)), "Expected weight to be of same shape as normalized_shape"),
        (((4,), ()), "at least 1-dimensional"),
    ],
)
def test_layer_norm_errors(args, match):
    x, shape, *w = args
    with pytest.raises(RuntimeError, match=match):
        F.layer_norm(serve.randn(*x), shape, *[serve.randn(*s) for s in w])


# ---- batch norm ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 4, 4)])
def test_batch_norm_training_and_eval(shape):
    def train(lib, x, w, b):
        return lib.nn.functional.batch_norm(x, None, None, w, b, training=True, eps=1e-4)

    check_op([shape, (3,), (3,)], train, **TOL)
    rm = np.array([0.1, -0.2, 0.3], np.float32)
    rv = np.array([0.5, 1.5, 2.0], np.float32)

    def evaluate(lib, x, w, b):
        return lib.nn.functional.batch_norm(x, lib.tensor(rm), lib.tensor(rv), w, b, training=False)

    check_op([shape, (3,), (3,)], evaluate, **TOL)
    check_op([shape, (3,), (3,)], evaluate, grad=False, **TOL)
    check_op([shape], lambda lib, x: lib.nn.functional.batch_norm(x, lib.tensor(rm), lib.tensor(rv)), **TOL)


@needs_torch
@pytest.mark.parametrize("momentum", [0.1, 0.5])
def test_batch_norm_functional_updates_running_stats(momentum):
    xs, xt = _pair((5, 3, 4), scale=2.0, shift=1.0)
    rms, rvs = serve.zeros(3), serve.ones(3)
    rmt, rvt = torch.zeros(3), torch.ones(3)
    for _ in range(2):
        F.batch_norm(xs, rms, rvs, training=True, momentum=momentum)
        torch.nn.functional.batch_norm(xt, rmt, rvt, training=True, momentum=momentum)
    assert_close(rms, rmt, **TOL)
    assert_close(rvs, rvt, **TOL)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_batch_norm_eval_half(dtype):
    rm, rv = np.array([0.1, -0.2], np.float32), np.array([0.5, 1.5], np.float32)
    tol = 1e-2 if dtype == "bfloat16" else 2e-3

    def evaluate(lib, x):
        return lib.nn.functional.batch_norm(x, lib.tensor(rm).to(x.dtype), lib.tensor(rv).to(x.dtype))

    check_op([(3, 2, 4, 4)], evaluate, dtype=dtype, grad=False, atol=tol, rtol=tol)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: F.batch_norm(serve.randn(2, 6, 3), serve.zeros(5), serve.ones(5)), RuntimeError,
         "running_mean should contain 6 elements not 5"),
        (lambda: F.batch_norm(serve.randn(1, 6), serve.zeros(6), serve.ones(6), training=True), ValueError,
         "Expected more than 1 value per channel when training"),
        (lambda: F.batch_norm(serve.randn(2, 6), None, None), RuntimeError, "must be defined in evaluation mode"),
        (lambda: F.batch_norm(serve.randn(2, 6), serve.zeros(6), None, training=True), ValueError, "both be None"),
        (lambda: F.batch_norm(serve.randn(2, 6), None, None, serve.ones(5), training=True), RuntimeError,
         "weight should contain 6 elements not 5"),
        (lambda: nn.BatchNorm2d(6)(serve.randn(2, 6, 3)), ValueError, r"expected 4D input \(got 3D input\)"),
        (lambda: nn.BatchNorm1d(6)(serve.randn(2, 6, 3, 3)), ValueError, r"expected 2D or 3D input \(got 4D input\)"),
    ],
)  # fmt: skip
def test_batch_norm_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ---- group norm, instance norm, normalize -------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 6, 5), (2, 6, 3, 3), (3, 6)])
def test_group_norm(shape):
    check_op([shape, (6,), (6,)], lambda lib, x, w, b: lib.nn.functional.group_norm(x, 3, w, b), **TOL)
    check_op([shape], lambda lib, x: lib.nn.functional.group_norm(x, 2, eps=1e-3), grad=False, **TOL)


def test_group_norm_errors():
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(serve.randn(2, 6, 3), 4)
    with pytest.raises(RuntimeError, match="Expected weight to be a vector of size equal to the number of channels"):
        F.group_norm(serve.randn(2, 6), 2, weight=serve.ones(5))
    with pytest.raises(ValueError, match=r"num_channels \(6\) must be divisible by num_groups \(4\)"):
        nn.GroupNorm(4, 6)


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 4)])
def test_instance_norm(shape):
    check_op([shape, (3,), (3,)], lambda lib, x, w, b: lib.nn.functional.instance_norm(x, weight=w, bias=b), **TOL)


@needs_torch
def test_instance_norm_running_stats_and_eval():
    xs, xt = _pair((4, 3, 6), scale=3.0, shift=-1.0)
    rms, rvs, rmt, rvt = serve.zeros(3), serve.ones(3), torch.zeros(3), torch.ones(3)
    ys = F.instance_norm(xs, rms, rvs, momentum=0.3)
    assert_close(ys, torch.nn.functional.instance_norm(xt, rmt, rvt, momentum=0.3), **TOL)
    assert_close(rms, rmt, **TOL)
    assert_close(rvs, rvt, **TOL)
    ys = F.instance_norm(xs, rms, rvs, use_input_stats=False)
    assert_close(ys, torch.nn.functional.instance_norm(xt, rmt, rvt, use_input_stats=False), **TOL)
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        F.instance_norm(serve.randn(2, 3, 1))
    with pytest.raises(RuntimeError, match="to be defined when use_input_stats is false"):
        F.instance_norm(xs, use_input_stats=False)


@pytest.mark.parametrize(("p", "dim"), [(2.0, 1), (1.0, 0), (3.0, -1)])
def test_normalize(p, dim):
    check_op([(3, 4)], lambda lib, x: lib.nn.functional.normalize(x, p=p, dim=dim), **TOL)


def test_normalize_zero_vector_and_out():
    x = serve.tensor([[0.0, 0.0], [3.0, 4.0]])
    out = serve.empty(2, 2)
    y = F.normalize(x, out=out)
    assert y is out
    np.testing.assert_allclose(out.numpy(), [[0.0, 0.0], [0.6, 0.8]], rtol=1e-6)


# ---- modules ------------------------------------------------------------------------------------------
def _load_from_torch(ours, ref):
    ours.load_state_dict({k: serve.tensor(v.numpy()) for k, v in ref.state_dict().items()})


def _same_state(ours, ref):
    sd, ref_sd = ours.state_dict(), ref.state_dict()
    assert list(sd) == list(ref_sd)
    for k in sd:
        assert_close(sd[k], ref_sd[k], **TOL)


@needs_torch
@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("BatchNorm1d", (8, 4)),
        ("BatchNorm1d", (8, 4, 3)),
        ("BatchNorm2d", (4, 4, 3, 3)),
        ("BatchNorm3d", (2, 4, 2, 2, 2)),
    ],
)
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batch_norm_module_training_steps_and_eval(name, shape, momentum):
    ours, ref = getattr(nn, name)(4, momentum=momentum), getattr(torch.nn, name)(4, momentum=momentum)
    assert repr(ours) == repr(ref)
    assert ours.num_batches_tracked.dtype == serve.int64
    _same_state(ours, ref)
    for step in range(3):
        xs, xt = _pair(shape, seed=step, scale=1 + step, shift=step - 1)
        xs.requires_grad_()
        xt.requires_grad_()
        ys, yt = ours(xs), ref(xt)
        assert_close(ys, yt, **TOL)
        (ys * ys).sum().backward()
        (yt * yt).sum().backward()
        assert_close(xs.grad, xt.grad, rtol=1e-4, atol=1e-4)
    _same_state(ours, ref)
    assert ours.num_batches_tracked.item() == 3
    assert_close(ours.weight.grad, ref.weight.grad, rtol=1e-4, atol=1e-4)
    assert_close(ours.bias.grad, ref.bias.grad, rtol=1e-4, atol=1e-4)
    ours.eval()
    ref.eval()
    xs, xt = _pair(shape, seed=9)
    assert_close(ours(xs), ref(xt), **TOL)
    with serve.no_grad():
        assert_close(ours(xs), ref(xt), **TOL)
    _same_state(ours, ref)  # eval leaves the running statistics alone


@needs_torch
@pytest.mark.parametrize("kwargs", [{"affine": False}, {"track_running_stats": False}, {"bias": False}])
def test_batch_norm_module_options(kwargs):
    ours, ref = nn.BatchNorm1d(3, **kwargs), torch.nn.BatchNorm1d(3, **kwargs)
    assert repr(ours) == repr(ref)
    assert list(ours.state_dict()) == list(ref.state_dict())
    xs, xt = _pair((5, 3))
    for mode in ("train", "eval"):
        getattr(ours, mode)()
        getattr(ref, mode)()
        assert_close(ours(xs), ref(xt), **TOL)
    _same_state(ours, ref)


@needs_torch
def test_batch_norm_loads_torch_checkpoint_and_old_version():
    ref = torch.nn.BatchNorm2d(3)
    ref(torch.randn(4, 3, 2, 2) * 3 + 1)
    ours = nn.BatchNorm2d(3)
    _load_from_torch(ours, ref)
    _same_state(ours, ref)
    old = {k: serve.tensor(v.numpy()) for k, v in ref.state_dict().items() if k != "num_batches_tracked"}
    from collections import OrderedDict

    old = OrderedDict(old)
    old._metadata = OrderedDict({"": {"version": 1}})
    fresh = nn.BatchNorm2d(3)
    assert fresh.load_state_dict(old) is not None
    assert fresh.num_batches_tracked.item() == 0
    assert_close(fresh.running_mean, ref.running_mean, **TOL)


@needs_torch
@pytest.mark.parametrize(
    ("name", "shape", "kwargs"),
    [("InstanceNorm1d", (2, 3, 5), {}), ("InstanceNorm1d", (3, 5), {"affine": True}),
     ("InstanceNorm2d", (2, 3, 4, 4), {"affine": True, "track_running_stats": True}),
     ("InstanceNorm2d", (3, 4, 4), {"track_running_stats": True}),
     ("InstanceNorm3d", (2, 3, 2, 2, 2), {})],
)  # fmt: skip
def test_instance_norm_modules(name, shape, kwargs):
    ours, ref = getattr(nn, name)(3, **kwargs), getattr(torch.nn, name)(3, **kwargs)
    assert repr(ours) == repr(ref)
    assert list(ours.state_dict()) == list(ref.state_dict())
    for mode in ("train", "eval"):
        getattr(ours, mode)()
        getattr(ref, mode)()
        xs, xt = _pair(shape, scale=2.0, shift=0.5)
        assert_close(ours(xs), ref(xt), **TOL)
    _same_state(ours, ref)


def test_instance_norm_module_errors():
    with pytest.raises(ValueError, match=r"expected 3D or 4D input \(got 2D input\)"):
        nn.InstanceNorm2d(6)(serve.randn(6, 3))
    with pytest.raises(ValueError, match="to match num_features"):
        nn.InstanceNorm1d(4, affine=True)(serve.randn(2, 3, 5))
    with pytest.warns(UserWarning, match="does not match num_features"):
        nn.InstanceNorm1d(4)(serve.randn(2, 3, 5))


@needs_torch
@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((6,), {}), (([3, 6],), {"eps": 1e-3}), ((6,), {"bias": False}), ((6,), {"elementwise_affine": False})],
)
def test_layer_norm_module(args, kwargs):
    ours, ref = nn.LayerNorm(*args, **kwargs), torch.nn.LayerNorm(*args, **kwargs)
    assert repr(ours) == repr(ref)
    assert list(ours.state_dict()) == list(ref.state_dict())
    for p in ref.parameters():
        with torch.no_grad():
            p.uniform_(0.5, 1.5)
    _load_from_torch(ours, ref)
    xs, xt = _pair((2, 3, 6), scale=4.0, shift=2.0)
    assert_close(ours(xs), ref(xt), **TOL)


@needs_torch
@pytest.mark.parametrize("kwargs", [{}, {"affine": False}, {"bias": False}])
def test_group_norm_module(kwargs):
    ours, ref = nn.GroupNorm(2, 6, **kwargs), torch.nn.GroupNorm(2, 6, **kwargs)
    assert repr(ours) == repr(ref)
    assert list(ours.state_dict()) == list(ref.state_dict())
    xs, xt = _pair((3, 6, 2, 2), scale=2.0)
    assert_close(ours(xs), ref(xt), **TOL)
