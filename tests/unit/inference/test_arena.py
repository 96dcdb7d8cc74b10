"""serve.inference.arena: the plan's output buffers are reused only when nobody can read them any more."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import serve
from serve import nn
from serve.inference import arena as arena_module
from serve.inference import kernels, optimize
from serve.inference.arena import MIN_BYTES, SHARE, Arena
from serve.zoo import resnet18
from tests.unit.zoo.parity import assert_rel_close

RNG = np.random.default_rng(0)
# The plans below take the native kernels untimed (tune=False: the last kernel that applies), whose outputs the arena
# serves: a timed plan may keep a BLAS kernel on some CPU, and then has nothing in the arena to test.
needs_native = pytest.mark.skipif(kernels.native() is None, reason="the arena serves the native kernels' outputs")
BIG = MIN_BYTES  # float32 elements of a buffer the arena serves (4 x MIN_BYTES bytes)


def test_a_dropped_buffer_is_reused_and_a_held_one_never():
    arena = Arena()
    a = arena.empty((BIG,))
    a[:] = 1.0
    b = arena.empty((BIG,))
    assert not np.shares_memory(a, b)  # a is held
    del a
    c = arena.empty((BIG,))
    assert arena.allocated == 2 and arena.reused == 1
    assert not np.shares_memory(b, c)


def test_views_and_tensors_hold_their_buffer():
    arena = Arena()
    a = arena.empty((4, BIG // 4))
    view = a[1:3].T  # a view keeps the buffer referenced through its base
    t = serve.from_numpy(arena.empty((BIG,)))
    del a
    fresh = [arena.empty((BIG,)) for _ in range(2)]
    assert arena.reused == 0 and arena.allocated == 4
    assert all(not np.shares_memory(f, view) and not np.shares_memory(f, t.numpy()) for f in fresh)
    del view, fresh
    arena.empty((BIG,))
    assert arena.reused == 1


def test_a_buffer_serves_smaller_requests_down_to_an_eighth_of_its_size():
    arena = Arena()
    del_me = arena.empty((SHARE * BIG,))
    del del_me
    eighth = arena.empty((BIG, 1))  # exactly an eighth (batch 1 in a batch-8 buffer): fits
    assert arena.reused == 1 and eighth.shape == (BIG, 1) and eighth.flags.c_contiguous
    del eighth
    arena.empty((BIG - 1024,))  # less: a buffer of its own
    assert arena.allocated == 2


def test_small_requests_bypass_the_arena():
    arena = Arena()
    arena.empty((16, 16))
    assert arena.allocated == 0 and arena.held == 0


def test_the_limit_drops_free_buffers_first_then_falls_back_to_malloc():
    arena = Arena(limit=3 * BIG * 4)
    held = [arena.empty((BIG,)) for _ in range(3)]
    assert arena.held == 3 * BIG * 4
    spill = arena.empty((BIG,))  # nothing free to drop: plain numpy, not held
    assert arena.allocated == 3 and not any(np.shares_memory(spill, h) for h in held)
    del held[0]
    bigger = arena.empty((BIG * 2 - 1024,))  # one free buffer is not enough room: malloc, nothing dropped
    assert arena.allocated == 3 and arena.held == 3 * BIG * 4 and bigger.shape == (BIG * 2 - 1024,)
    del held[0]
    bigger = arena.empty((BIG * 2 - 1024,))  # two free: dropped (least recently used first) to make room
    assert arena.allocated == 4 and arena.held == BIG * 4 + bigger.nbytes
    assert not np.shares_memory(bigger, held[0])


def test_kernel_timing_bypasses_the_arena():
    class Owner:
        arena = Arena()

    with arena_module.bypassed():
        plain = arena_module.empty(Owner, (BIG,))
    assert Owner.arena.allocated == 0 and plain.shape == (BIG,)
    arena_module.empty(Owner, (BIG,))
    assert Owner.arena.allocated == 1


def _features_model() -> nn.Module:
    class Features(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Conv2d(3, 32, 3, padding=1)
            self.b = nn.Conv2d(32, 32, 3, padding=1)
            self.c = nn.Conv2d(32, 32, 3, padding=1)

        def forward(self, x):  # returns intermediate feature maps, as FPN backbones do
            a = self.a(x).relu()
            b = self.b(a).relu()
            return a, self.c(b)

    return Features().eval()


@needs_native
def test_outputs_kept_by_the_caller_survive_later_calls():
    model = _features_model()
    x1 = serve.from_numpy(RNG.standard_normal((4, 3, 40, 40)).astype(np.float32))
    x2 = serve.from_numpy(RNG.standard_normal((4, 3, 40, 40)).astype(np.float32))
    with serve.no_grad():
        opt = optimize(model, (x1,), tune=False)
        first = opt(x1)
        kept = [t.numpy().copy() for t in first]
        for _ in range(3):
            second = opt(x2)
        want = model(x2)
    assert opt.optimized, opt.reason
    for got, copy in zip(first, kept):
        np.testing.assert_array_equal(got.numpy(), copy)
    for got, ref in zip(second, want):
        assert_rel_close(got.numpy(), ref.numpy(), 1e-4)
    assert opt.describe()["arena"]["reused"] > 0


@needs_native
def test_resnet_reuses_its_activations_and_threads_never_share_a_buffer():
    model = resnet18(num_classes=10).eval()
    xs = [serve.from_numpy(RNG.standard_normal((2, 3, 64, 64)).astype(np.float32)) for _ in range(4)]
    with serve.no_grad():
        wants = [model(x).numpy() for x in xs]
        opt = optimize(model, (xs[0],), tune=False)
        opt(xs[0])
        assert opt.optimized, opt.reason
        after_one = opt.describe()["arena"]["allocated"]
        for x in xs:
            opt(x)
        assert 0 < opt.describe()["arena"]["allocated"] == after_one  # steady state: nothing new per call
        # the peak live set of a sequential net, not the kernel timing's (which kept every candidate's output)
        assert after_one <= 6, opt.describe()["arena"]
        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                with serve.no_grad():
                    for _ in range(3):
                        assert_rel_close(opt(xs[i]).numpy(), wants[i], 1e-4)
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not errors, errors
