"""Grad mode: no_grad, enable_grad, set_grad_enabled, inference_mode, is_grad_enabled, and their scope."""

from __future__ import annotations

import threading

import pytest

import serve
from tests.helpers import needs_torch, torch


@pytest.fixture(autouse=True)
def _grad_mode_restored():
    assert serve.is_grad_enabled()
    yield
    assert serve.is_grad_enabled(), "a test left grad mode off"


def _recorded(t):
    return t.requires_grad and t.grad_fn is not None


def test_no_grad_context_manager():
    x = serve.ones(2, requires_grad=True)
    with serve.no_grad():
        assert not serve.is_grad_enabled()
        y = x * 2
        z = y.sum()
    assert serve.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None and y.is_leaf
    assert not z.requires_grad
    assert _recorded(x * 2)


def test_no_grad_restores_on_exception():
    with pytest.raises(ValueError), serve.no_grad():
        raise ValueError
    assert serve.is_grad_enabled()


def test_no_grad_decorator_with_and_without_parentheses():
    x = serve.ones(2, requires_grad=True)

    @serve.no_grad()
    def f(t):
        assert not serve.is_grad_enabled()
        return t * 2

    @serve.no_grad
    def g(t):
        """Doubles."""
        return t * 2

    assert not f(x).requires_grad and not g(x).requires_grad
    assert g.__name__ == "g" and g.__doc__ == "Doubles."
    assert serve.is_grad_enabled()


def test_no_grad_decorator_on_generator():
    x = serve.ones(2, requires_grad=True)

    @serve.no_grad()
    def gen():
        for _ in range(2):
            yield x * 2, serve.is_grad_enabled()

    it = gen()
    y, mode = next(it)
    assert not y.requires_grad and mode is False
    assert serve.is_grad_enabled()  # the caller's mode between steps
    y, mode = next(it)
    assert not y.requires_grad and mode is False
    assert list(it) == []
    assert serve.is_grad_enabled()


def test_enable_grad_inside_no_grad():
    x = serve.ones(2, requires_grad=True)
    with serve.no_grad():
        with serve.enable_grad():
            assert serve.is_grad_enabled()
            y = x * 2
        assert not serve.is_grad_enabled()
        z = x * 2

        @serve.enable_grad()
        def f(t):
            return t * 2

        w = f(x)
    assert _recorded(y) and not z.requires_grad and _recorded(w)


def test_set_grad_enabled_as_function_and_context_manager():
    x = serve.ones(2, requires_grad=True)
    serve.set_grad_enabled(False)
    try:
        assert not serve.is_grad_enabled()
        assert not (x * 2).requires_grad
    finally:
        serve.set_grad_enabled(True)
    assert serve.is_grad_enabled()
    with serve.set_grad_enabled(False):
        assert not serve.is_grad_enabled()
        with serve.set_grad_enabled(True):
            assert _recorded(x * 2)
        assert not serve.is_grad_enabled()
    assert serve.is_grad_enabled()
    is_train = False
    with serve.set_grad_enabled(is_train):
        assert not (x * 2).requires_grad


def test_set_grad_enabled_as_decorator():
    x = serve.ones(2, requires_grad=True)

    @serve.set_grad_enabled(False)
    def f(t):
        return t * 2

    assert serve.is_grad_enabled()  # decorating does not leave the mode changed
    assert not f(x).requires_grad
    assert serve.is_grad_enabled()


def test_inference_mode():
    x = serve.ones(2, requires_grad=True)
    with serve.inference_mode():
        assert not serve.is_grad_enabled()
        assert not (x * 2).requires_grad
    with serve.no_grad(), serve.inference_mode(False):
        assert serve.is_grad_enabled()  # as in PyTorch: inference_mode(False) turns grad mode on

    @serve.inference_mode()
    def f(t):
        return t * 2

    @serve.inference_mode
    def g(t):
        return t * 2

    assert not f(x).requires_grad and not g(x).requires_grad


def test_autograd_namespace_exports_grad_mode():
    assert serve.autograd.no_grad is serve.no_grad
    assert serve.autograd.enable_grad is serve.enable_grad
    assert serve.autograd.set_grad_enabled is serve.set_grad_enabled
    assert serve.autograd.inference_mode is serve.inference_mode


def test_grad_mode_is_per_thread():
    seen = {}

    def worker():
        seen["enabled"] = serve.is_grad_enabled()
        x = serve.ones(2, requires_grad=True)
        seen["recorded"] = _recorded(x * 2)
        with serve.no_grad():
            seen["inner"] = serve.is_grad_enabled()

    with serve.no_grad():
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert not serve.is_grad_enabled()  # the thread's no_grad did not leak here either
    assert seen == {"enabled": True, "recorded": True, "inner": False}


def test_thread_no_grad_does_not_leak_to_main():
    ready, done = threading.Event(), threading.Event()

    def worker():
        with serve.no_grad():
            ready.set()
            done.wait(5)

    t = threading.Thread(target=worker)
    t.start()
    ready.wait(5)
    assert serve.is_grad_enabled()
    done.set()
    t.join()


def test_backward_works_under_no_grad():
    # the graph was recorded before: backward inside no_grad still computes gradients, as in PyTorch
    x = serve.ones(2, requires_grad=True)
    y = (x * 3).sum()
    with serve.no_grad():
        y.backward()
    assert x.grad.tolist() == [3.0, 3.0]


@needs_torch
def test_matches_torch_semantics():
    for lib in (serve, torch):
        x = lib.ones(2, requires_grad=True)
        with lib.no_grad():
            with lib.enable_grad():
                a = x * 2
            b = x * 2
        assert (a.requires_grad, b.requires_grad) == (True, False)
        with lib.no_grad(), lib.inference_mode(False):
            assert lib.is_grad_enabled()
