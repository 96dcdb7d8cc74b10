"""Module's contract against PyTorch's: registries, traversal order, modes, moves, hooks, repr."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import serve
from serve import nn
from tests.helpers import needs_torch, torch


def _build(lib):
    """The same small tree in serve or torch: parameters, buffers (one non-persistent), nested children."""

    class Leaf(lib.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = lib.nn.Parameter(lib.ones(n, n))
            self.register_parameter("bias", None)
            self.register_buffer("running", lib.zeros(n))
            self.register_buffer("scratch", lib.zeros(n), persistent=False)

        def forward(self, x):
            return x @ self.weight

    class Tree(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.first = Leaf(2)
            self.blocks = lib.nn.Sequential(Leaf(2), lib.nn.Identity(), Leaf(2))
            self.heads = lib.nn.ModuleDict({"a": Leaf(2), "b": lib.nn.Flatten()})
            self.extra = lib.nn.Parameter(lib.zeros(3))

        def forward(self, x):
            return self.blocks(self.first(x))

    return Tree()


@needs_torch
def test_traversal_matches_torch():
    ours, ref = _build(serve), _build(torch)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in ref.named_buffers()]
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in ref.named_modules()]
    assert [n for n, _ in ours.named_children()] == [n for n, _ in ref.named_children()]
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert list(ours.state_dict()._metadata) == list(ref.state_dict()._metadata)
    assert [n for n, _ in ours.named_parameters(recurse=False)] == ["extra"]
    assert len(list(ours.parameters())) == len(list(ref.parameters()))


@needs_torch
def test_repr_matches_torch():
    ours, ref = _build(serve), _build(torch)
    assert repr(ours) == repr(ref)
    assert repr(serve.nn.ModuleList([serve.nn.Identity()] * 3 + [serve.nn.Flatten()])) == repr(
        torch.nn.ModuleList([torch.nn.Identity()] * 3 + [torch.nn.Flatten()])
    )
    assert repr(serve.nn.Unflatten(1, (2, 5))) == repr(torch.nn.Unflatten(1, (2, 5)))


def test_shared_parameters_are_listed_once():
    a = nn.Sequential(nn.Identity())
    p = nn.Parameter(serve.ones(2))
    a.register_parameter("p", p)
    a.q = p
    assert [n for n, _ in a.named_parameters()] == ["p"]
    assert [n for n, _ in a.named_parameters(remove_duplicate=False)] == ["p", "q"]
    assert list(a.state_dict()) == ["p", "q"]


def test_setattr_routing_and_errors():
    m = nn.Module()
    m.w = nn.Parameter(serve.zeros(2))
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'w'"):
        m.w = serve.zeros(2)
    m.w = None
    assert m.w is None and "w" in m._parameters
    m.register_buffer("b", serve.zeros(1))
    m.b = serve.ones(1)
    assert float(m.b[0]) == 1.0
    with pytest.raises(TypeError, match="buffer 'b'"):
        m.b = 3
    m.child = nn.Identity()
    with pytest.raises(TypeError, match="child module 'child'"):
        m.child = 4
    with pytest.raises(KeyError, match="be empty or contain"):
        m.register_buffer("a.b", serve.zeros(1))
    with pytest.raises(KeyError, match="already exists"):
        m.plain = 1
        m.register_parameter("plain", None)
    with pytest.raises(AttributeError, match=r"before Module.__init__"):

        class Bad(nn.Module):
            def __init__(self):
                self.w = nn.Parameter(serve.zeros(1))

        Bad()
    with pytest.raises(AttributeError, match="has no attribute 'missing'"):
        m.missing
    del m.child
    assert "child" not in m._modules
    m.buf = nn.Buffer(serve.ones(2), persistent=False)
    assert "buf" in m._buffers and "buf" not in m.state_dict()


def test_forward_missing_is_a_clear_error():
    with pytest.raises(NotImplementedError, match='missing the required "forward"'):
        nn.Module()(1)


def test_train_eval_and_apply():
    m = _build(serve)
    assert m.training and all(c.training for c in m.modules())
    m.eval()
    assert not any(c.training for c in m.modules())
    with pytest.raises(ValueError, match="boolean"):
        m.train("yes")
    seen = []
    m.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen[-1] == "Tree" and seen[0] == "Leaf"


def test_to_half_float_keep_parameter_identity():
    m = _build(serve)
    w = m.first.weight
    m.half()
    assert m.first.weight is w and w.dtype == serve.float16 and isinstance(w, nn.Parameter)
    assert m.first.running.dtype == serve.float16
    m.to(serve.float64)
    assert w.dtype == serve.float64 and w.requires_grad
    m.float().to("cpu")
    assert w.dtype == serve.float32 and w.device.type == "cpu"
    with pytest.raises(TypeError, match="floating point"):
        m.to(serve.int64)
    counter = nn.Module()
    counter.register_buffer("n", serve.tensor(3))
    counter.half()
    assert counter.n.dtype == serve.int64


def test_requires_grad_and_zero_grad():
    m = _build(serve)
    out = m(serve.ones(1, 2)).sum()
    out.backward()
    assert m.first.weight.grad is not None
    m.zero_grad(set_to_none=False)
    assert float(m.first.weight.grad.abs().sum()) == 0.0
    m.zero_grad()
    assert m.first.weight.grad is None
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())


@needs_torch
def test_hooks_match_torch_order_and_replacement():
    logs = {}
    for lib in (serve, torch):
        log = logs[lib.__name__] = []
        m = lib.nn.Sequential(lib.nn.Identity(), lib.nn.Flatten())
        m[1].register_forward_hook(lambda mod, args, out, log=log: log.append(("hook", tuple(out.shape))))
        m[1].register_forward_pre_hook(lambda mod, args, log=log: log.append(("pre", tuple(args[0].shape))))
        m[1].register_forward_hook(lambda mod, args, out, log=log: log.append(("first", 0)), prepend=True)
        m[1].register_forward_hook(lambda mod, args, kwargs, out: out * 2, with_kwargs=True)
        m[1].register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
        out = m(lib.ones(2, 3, 4))
        log.append(("out", float(out.sum())))
    assert logs["serve"] == logs["torch"]


def test_hook_handles_remove_and_context_manager():
    m = nn.Identity()
    calls = []
    h = m.register_forward_hook(lambda mod, a, o: calls.append(1))
    m(serve.ones(1))
    h.remove()
    m(serve.ones(1))
    with m.register_forward_pre_hook(lambda mod, a: calls.append(2)):
        m(serve.ones(1))
    m(serve.ones(1))
    assert calls == [1, 2]


def test_always_call_hook_runs_when_forward_raises():
    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    m, calls = Boom(), []
    m.register_forward_hook(lambda mod, a, o: calls.append(o), always_call=True)
    with pytest.raises(ValueError):
        m(1)
    assert calls == [None]


def test_get_submodule_parameter_buffer():
    m = _build(serve)
    assert m.get_submodule("blocks.2") is m.blocks[2]
    assert m.get_parameter("heads.a.weight") is m.heads["a"].weight
    assert m.get_buffer("first.running") is m.first.running
    with pytest.raises(AttributeError, match="no attribute `nope`"):
        m.get_submodule("blocks.nope")


def test_deepcopy_is_independent():
    m = _build(serve)
    c = copy.deepcopy(m)
    assert isinstance(c.first.weight, nn.Parameter) and c.first.weight.requires_grad
    with serve.no_grad():
        c.first.weight.add_(1)
    assert float(m.first.weight.sum()) == 4.0 and float(c.first.weight.sum()) == 8.0


def test_parameter_behaves_like_torch():
    p = nn.Parameter(serve.ones(2, 2))
    assert p.requires_grad and p.is_leaf and isinstance(p, serve.Tensor)
    assert type(p * 2) is serve.Tensor
    assert repr(p).startswith("Parameter containing:\ntensor(")
    frozen = nn.Parameter(serve.ones(1), requires_grad=False)
    assert not frozen.requires_grad
    src = serve.zeros(3)
    shared = nn.Parameter(src)
    with serve.no_grad():
        shared.add_(1)
    np.testing.assert_array_equal(src.numpy(), [1, 1, 1])
    with pytest.raises(RuntimeError, match="floating point"):
        nn.Parameter(serve.zeros(2, dtype=serve.int64))
