"""Containers and shape layers against PyTorch: indexing, slicing, mutation, keys, forward."""

from __future__ import annotations

from collections import OrderedDict

import pytest

import serve
from serve import nn
from tests.helpers import assert_close, needs_torch, torch


def _names(m):
    return [n for n, _ in m.named_modules()]


@needs_torch
def test_sequential_like_torch():
    for lib in (serve, torch):
        s = lib.nn.Sequential(lib.nn.Identity(), lib.nn.Flatten(), lib.nn.Identity())
        s.append(lib.nn.Flatten(0))
        s.insert(1, lib.nn.Identity())
        del s[2]
        part = s[1:3]
        assert isinstance(part, lib.nn.Sequential)
        s.extend([lib.nn.Identity()])
        s.pop(0)
        if lib is serve:
            ours, ours_part, ours_len = repr(s), repr(part), len(s)
        else:
            assert ours == repr(s) and ours_part == repr(part) and ours_len == len(s)
    named = serve.nn.Sequential(OrderedDict([("conv", nn.Identity()), ("act", nn.Flatten())]))
    assert _names(named) == ["", "conv", "act"]
    assert named[-1] is named.act
    with pytest.raises(IndexError, match="out of range"):
        named[5]


def test_sequential_forward_chains():
    s = nn.Sequential(nn.Flatten(), nn.Unflatten(1, (3, 4)))
    x = serve.randn(2, 3, 4)
    assert_close(s(x), x, check_dtype=True)
    assert len(s + nn.Sequential(nn.Identity())) == 3


@needs_torch
def test_module_list_like_torch():
    for lib in (serve, torch):
        ml = lib.nn.ModuleList([lib.nn.Identity(), lib.nn.Flatten()])
        ml += [lib.nn.Identity()]
        ml.insert(0, lib.nn.Flatten(2))
        ml[1] = lib.nn.Flatten(3)
        del ml[0]
        got = (repr(ml), [type(m).__name__ for m in ml[::2]], len(ml), _names(ml))
        if lib is serve:
            ours = got
        else:
            assert ours == got
    with pytest.raises(TypeError, match="iterable"):
        nn.ModuleList().extend(3)


def test_module_dict():
    d = nn.ModuleDict({"b": nn.Identity()})
    d.update([("a", nn.Flatten())])
    d["c"] = nn.Identity()
    assert list(d) == ["b", "a", "c"] and "a" in d and len(d) == 3
    assert _names(d) == ["", "b", "a", "c"]
    d.pop("b")
    assert list(d.keys()) == ["a", "c"]
    with pytest.raises(ValueError, match="#0"):
        d.update([("only-key",)])


@needs_torch
def test_parameter_list_and_dict_keys_match_torch():
    pl = nn.ParameterList([serve.ones(2), nn.Parameter(serve.zeros(3))])
    pl.append(serve.ones(1))
    ref = torch.nn.ParameterList([torch.ones(2), torch.nn.Parameter(torch.zeros(3))])
    ref.append(torch.ones(1))
    assert list(pl.state_dict()) == list(ref.state_dict())
    assert all(isinstance(p, nn.Parameter) for p in pl) and len(pl[1:]) == 2
    assert repr(pl).replace("serve.", "torch.") == repr(ref)
    pd = nn.ParameterDict({"x": serve.ones(2)})
    pd["y"] = serve.zeros(1)
    refd = torch.nn.ParameterDict({"x": torch.ones(2)})
    refd["y"] = torch.zeros(1)
    assert list(pd.state_dict()) == list(refd.state_dict()) and list(pd.keys()) == ["x", "y"]
    with pytest.raises(RuntimeError, match="should not be called"):
        pl()


@needs_torch
@pytest.mark.parametrize("start,end", [(1, -1), (0, -1), (1, 2), (-2, -1)])
def test_flatten_like_torch(start, end):
    x = torch.randn(2, 3, 4, 5)
    assert_close(nn.Flatten(start, end)(serve.from_numpy(x.numpy())), torch.nn.Flatten(start, end)(x))


@needs_torch
def test_unflatten_and_identity_like_torch():
    x = torch.randn(2, 12)
    assert_close(nn.Unflatten(1, (3, -1))(serve.from_numpy(x.numpy())), torch.nn.Unflatten(1, (3, -1))(x))
    assert nn.Identity(54, unused="x")(x) is x
    with pytest.raises(TypeError, match="tuple of ints"):
        nn.Unflatten(1, 3)
