"""Losses against PyTorch: values and gradients for every reduction, weights, ignore_index, label smoothing, class
probability targets, legacy size_average/reduce, modules' state_dicts and error messages."""

import numpy as np
import pytest

import serve
from serve import nn
from tests.helpers import assert_close, check_op, needs_torch, torch

TOL = {"rtol": 1e-5, "atol": 1e-6}
F = serve.nn.functional
REDUCTIONS = ["mean", "sum", "none"]
TARGET = np.array([0, 3, 1, -100, 2])  # -100: ignored
TARGET_2D = np.array([[0, 3, 1], [2, -100, 3]])
CLASS_WEIGHT = np.array([0.5, 2.0, 1.0, 1.5], np.float32)


def _weight(lib, weighted):
    return lib.tensor(CLASS_WEIGHT) if weighted else None  # class weights never require grad in PyTorch


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(reduction, weighted):
    def fn(lib, x, t):
        return lib.nn.functional.nll_loss(x, t, weight=_weight(lib, weighted), reduction=reduction)

    check_op([(5, 4), TARGET], fn, low=0.1, **TOL)
    check_op([(2, 4, 3), TARGET_2D], fn, low=0.1, **TOL)


def test_nll_loss_unbatched_and_custom_ignore_index():
    check_op([(4,), np.array(2)], lambda lib, x, t: lib.nn.functional.nll_loss(x, t), **TOL)
    check_op([(5, 4), np.array([0, 3, 1, 3, 2])], lambda lib, x, t: lib.nn.functional.nll_loss(x, t, ignore_index=3),
             **TOL)  # fmt: skip


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_class_indices(reduction, smoothing, weighted):
    def fn(lib, x, t):
        w = _weight(lib, weighted)
        return lib.nn.functional.cross_entropy(x, t, weight=w, reduction=reduction, label_smoothing=smoothing)

    check_op([(5, 4), TARGET], fn, low=0.1, **TOL)
    check_op([(2, 4, 3), TARGET_2D], fn, low=0.1, **TOL)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_class_probabilities(reduction, smoothing):
    def fn(lib, x, p):
        w = _weight(lib, True)
        return lib.nn.functional.cross_entropy(
            x, p.softmax(1), weight=w, reduction=reduction, label_smoothing=smoothing
        )

    check_op([(5, 4), (5, 4)], fn, **TOL)
    check_op([(2, 4, 3), (2, 4, 3)], lambda lib, x, p: lib.nn.functional.cross_entropy(x, p.softmax(1)), **TOL)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_cross_entropy_all_ignored_is_nan_like_torch():
    loss = F.cross_entropy(serve.randn(2, 3), serve.tensor([-100, -100]))
    assert np.isnan(loss.item())


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy(reduction):
    def fn(lib, x, t):
        w = lib.tensor(CLASS_WEIGHT[:3])
        return lib.nn.functional.binary_cross_entropy(x, t, weight=w, reduction=reduction)

    check_op([(4, 3), (4, 3)], fn, low=0.05, high=0.95, **TOL)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("pos_weight", [False, True])
def test_binary_cross_entropy_with_logits(reduction, pos_weight):
    def fn(lib, x, t):
        w = lib.tensor(CLASS_WEIGHT[1:])
        pw = lib.tensor(CLASS_WEIGHT[:3] * 2) if pos_weight else None
        return lib.nn.functional.binary_cross_entropy_with_logits(x, t.sigmoid(), w, reduction=reduction, pos_weight=pw)

    check_op([(4, 3), (4, 3)], fn, low=-6, high=6, **TOL)


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_regression_losses(name, reduction):
    check_op([(4, 5), (4, 5)], lambda lib, x, t: getattr(lib.nn.functional, name)(x, t, reduction=reduction), **TOL)


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "huber_loss"])
def test_weighted_regression_losses(name):
    for reduction in REDUCTIONS:

        def fn(lib, x, t, r=reduction):
            w = lib.tensor(np.linspace(0.1, 2.0, 20, dtype=np.float32).reshape(4, 5))
            return getattr(lib.nn.functional, name)(x, t, reduction=r, weight=w)

        check_op([(4, 5), (4, 5)], fn, **TOL)


@pytest.mark.parametrize(("beta", "delta"), [(0.5, 0.5), (0.0, 2.0), (3.0, 3.0)])
def test_smooth_l1_beta_and_huber_delta(beta, delta):
    check_op([(4, 5), (4, 5)], lambda lib, x, t: lib.nn.functional.smooth_l1_loss(x, t, beta=beta), **TOL)
    check_op([(4, 5), (4, 5)], lambda lib, x, t: lib.nn.functional.huber_loss(x, t, delta=delta), **TOL)


@pytest.mark.parametrize("reduction", ["batchmean", "sum", "none", "mean"])
@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
def test_kl_div(reduction, log_target):
    def fn(lib, x, t):
        target = t.log_softmax(1) if log_target else t.softmax(1)
        return lib.nn.functional.kl_div(x.log_softmax(1), target, reduction=reduction, log_target=log_target)

    check_op([(3, 4), (3, 4)], fn, **TOL)


def test_kl_div_zero_target_gives_zero():
    loss = F.kl_div(serve.tensor([[-1.0, -2.0]]), serve.tensor([[0.0, 1.0]]), reduction="sum")
    assert loss.item() == pytest.approx(2.0)


@needs_torch
@pytest.mark.filterwarnings("ignore:size_average and reduce args will be deprecated")
@pytest.mark.parametrize(("size_average", "reduce"), [(False, None), (None, False), (True, True), (False, True)])
def test_legacy_size_average_and_reduce(size_average, reduce):
    x, t = np.random.default_rng(0).normal(size=(2, 3, 4)).astype(np.float32)
    ours = F.mse_loss(serve.tensor(x), serve.tensor(t), size_average=size_average, reduce=reduce)
    ref = torch.nn.functional.mse_loss(torch.tensor(x), torch.tensor(t), size_average=size_average, reduce=reduce)
    assert_close(ours, ref, **TOL)
    assert nn.MSELoss(size_average, reduce).reduction == torch.nn.MSELoss(size_average, reduce).reduction


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: F.nll_loss(serve.randn(2, 3), serve.tensor([0, 3])), IndexError, "Target 3 is out of bounds"),
        (lambda: F.nll_loss(serve.randn(2, 3), serve.tensor([0, 1, 2])), ValueError,
         r"Expected input batch_size \(2\) to match target batch_size \(3\)"),
        (lambda: F.nll_loss(serve.randn(2, 3), serve.tensor([0.0, 1.0])), RuntimeError, "Long or Byte"),
        (lambda: F.nll_loss(serve.randn(2, 3), serve.tensor([[0, 1], [1, 1]])), RuntimeError, "multi-target"),
        (lambda: F.nll_loss(serve.randn(2, 3), serve.tensor([0, 1]), weight=serve.ones(4)), RuntimeError,
         "weight tensor should be defined either for all 3 classes"),
        (lambda: F.cross_entropy(serve.randn(2, 3), serve.tensor([0, 1]), label_smoothing=1.5), RuntimeError,
         "label_smoothing must be between 0.0 and 1.0"),
        (lambda: F.cross_entropy(serve.randn(2, 3), serve.tensor([[0, 1, 2], [1, 1, 1]])), RuntimeError,
         "Expected floating point type for target with class probabilities"),
        (lambda: F.binary_cross_entropy(serve.rand(2, 3), serve.rand(2, 4)), ValueError, "different to the input size"),
        (lambda: F.binary_cross_entropy(serve.rand(3) + 1, serve.rand(3)), RuntimeError,
         "all elements of input should be between 0 and 1"),
        (lambda: F.binary_cross_entropy_with_logits(serve.rand(2, 3), serve.rand(2, 4)), ValueError,
         "must be the same as input size"),
        (lambda: F.mse_loss(serve.rand(3), serve.rand(3), reduction="foo"), ValueError,
         "foo is not a valid value for reduction"),
        (lambda: F.smooth_l1_loss(serve.rand(3), serve.rand(3), beta=-1), RuntimeError, "negative values for beta"),
        (lambda: F.mse_loss(serve.rand(3), serve.rand(3), weight=serve.ones(2)), ValueError,
         "Weights and input must have the same size"),
    ],
)  # fmt: skip
def test_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_mse_broadcast_warns():
    with pytest.warns(UserWarning, match="different to the input size"):
        F.mse_loss(serve.rand(3, 2), serve.rand(2))


# ---- modules ------------------------------------------------------------------------------------------
LOSS_MODULES = [
    ("L1Loss", {}, "reg"), ("MSELoss", {"reduction": "sum"}, "reg"), ("SmoothL1Loss", {"beta": 0.5}, "reg"),
    ("HuberLoss", {"delta": 0.7}, "reg"), ("KLDivLoss", {"reduction": "batchmean"}, "reg"),
    ("CrossEntropyLoss", {"label_smoothing": 0.1, "ignore_index": 1}, "cls"),
    ("CrossEntropyLoss", {"weight": np.array([1.0, 2.0, 0.5])}, "cls"), ("NLLLoss", {}, "cls"),
    ("NLLLoss", {"weight": np.array([1.0, 2.0, 0.5]), "reduction": "none"}, "cls"),
    ("BCELoss", {"weight": np.array([1.0, 2.0, 0.5])}, "prob"), ("BCEWithLogitsLoss", {}, "prob"),
    ("BCEWithLogitsLoss", {"weight": np.array([1.0, 2.0, 0.5]), "pos_weight": np.array([3.0, 1.0, 0.5])}, "prob"),
]  # fmt: skip


@needs_torch
@pytest.mark.parametrize(
    ("name", "kwargs", "kind"), LOSS_MODULES, ids=[f"{m[0]}{i}" for i, m in enumerate(LOSS_MODULES)]
)
def test_loss_modules(name, kwargs, kind):
    def build(lib):
        args = {k: lib.tensor(v.astype(np.float32)) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        return getattr(lib.nn, name)(**args)

    ours, ref = build(serve), build(torch)
    assert repr(ours) == repr(ref)
    assert list(ours.state_dict()) == list(ref.state_dict())
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 3)).astype(np.float32)
    if kind == "cls":
        t = np.array([0, 2, 1, 1])
    elif kind == "prob":
        x, t = 1 / (1 + np.exp(-x)) if name == "BCELoss" else x, rng.uniform(size=(4, 3)).astype(np.float32)
    elif name == "KLDivLoss":
        t = rng.dirichlet(np.ones(3), size=4).astype(np.float32)  # probabilities, as KL divergence needs
    else:
        t = rng.normal(size=(4, 3)).astype(np.float32)
    xs, xt = serve.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ys, yt = ours(xs, serve.tensor(t)), ref(xt, torch.tensor(t))
    assert_close(ys, yt, **TOL)
    ys.sum().backward()
    yt.sum().backward()
    assert_close(xs.grad, xt.grad, **TOL)
