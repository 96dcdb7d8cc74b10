"""The CPU lanes (serve/backend/cpu_threads.py) and what runs on them: split products, convolutions and the
elementwise kernels give the results of the unsplit numpy computation, on any number of lanes."""

from __future__ import annotations

import ctypes
import multiprocessing
import threading
import time
from collections.abc import Iterator
from functools import partial

import numpy as np
import pytest

import serve
from serve.backend import cpu_blas, cpu_conv, cpu_nn, cpu_pool, cpu_threads, ops_cpu


@pytest.fixture
def lanes() -> Iterator[None]:
    """Restore the lane count a test changes."""
    before = serve.get_num_threads()
    yield
    serve.set_num_threads(before)


def test_spans_cover_the_range_in_near_equal_runs() -> None:
    assert cpu_threads.spans(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert cpu_threads.spans(2, 4) == [(0, 1), (1, 2)]
    assert cpu_threads.spans(0, 4) == []
    assert cpu_threads.spans(100, 2, grain=16) == [(0, 48), (48, 100)]
    for n in range(0, 40):
        for parts in (1, 2, 3, 5):
            got = cpu_threads.spans(n, parts)
            assert [i for a, b in got for i in range(a, b)] == list(range(n))
            assert len(got) <= parts


@pytest.mark.usefixtures("lanes")
@pytest.mark.parametrize("count", [1, 2, 3])
def test_parallel_runs_every_span_once_on_its_own_lane(count: int) -> None:
    serve.set_num_threads(count)
    seen: list[tuple[int, int, str]] = []
    cpu_threads.parallel(lambda a, b: seen.append((a, b, threading.current_thread().name)), cpu_threads.spans(30))
    assert sorted((a, b) for a, b, _ in seen) == cpu_threads.spans(30)
    names = {name for *_, name in seen}
    assert len(names) == count  # one span per lane, the caller taking the first
    assert threading.current_thread().name in names


@pytest.mark.usefixtures("lanes")
def test_a_lane_error_is_raised_to_the_caller_and_the_lanes_keep_working() -> None:
    serve.set_num_threads(2)

    def fail_second(a: int, b: int) -> None:
        if a > 0:
            raise ValueError(f"span {a}:{b} failed")

    with pytest.raises(ValueError, match="span 5:10 failed"):
        cpu_threads.parallel(fail_second, [(0, 5), (5, 10)])
    out = np.zeros(10)
    cpu_threads.parallel(lambda a, b: out.__setitem__(slice(a, b), 1), [(0, 5), (5, 10)])
    assert out.sum() == 10


def _fill(row: np.ndarray, value: float, a: int, b: int) -> None:
    row[a:b] = value


def _half_sum(x: np.ndarray, total: np.ndarray, a: int, b: int) -> None:
    total[a // 500] = x[a:b].sum()


@pytest.mark.usefixtures("lanes")
def test_nested_and_concurrent_calls_run_inline_instead_of_waiting_on_themselves() -> None:
    serve.set_num_threads(2)
    out = np.zeros((4, 8))

    def outer(a: int, b: int) -> None:  # each lane splits again: that runs inline on the lane
        for i in range(a, b):
            row = out[i]
            cpu_threads.parallel(partial(_fill, row, i + 1), [(0, 4), (4, 8)])

    cpu_threads.parallel(outer, [(0, 2), (2, 4)])
    assert (out == np.arange(1, 5)[:, None]).all()

    results: dict[int, float] = {}

    def caller(k: int) -> None:  # two threads share the lanes: whoever finds them busy runs inline
        for _ in range(50):
            x = np.full(1000, float(k))
            total = np.zeros(2)
            cpu_threads.parallel(partial(_half_sum, x, total), [(0, 500), (500, 1000)])
            results[k] = total.sum()

    threads = [threading.Thread(target=caller, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == {1: 1000.0, 2: 2000.0}


def _child_conv(queue: multiprocessing.Queue) -> None:
    x = np.ones((4, 3, 8, 8), np.float32)
    y = cpu_conv.conv2d(x, np.ones((2, 3, 3, 3), np.float32), None, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    queue.put(float(y[:, :, 1:-1, 1:-1].mean()))


@pytest.mark.usefixtures("lanes")
def test_a_forked_child_starts_its_own_lanes() -> None:
    serve.set_num_threads(2)
    cpu_threads.parallel(lambda a, b: None, [(0, 1), (1, 2)])  # the parent's lanes exist before the fork
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_conv, args=(queue,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0, "the forked child hung or failed"
    assert queue.get(timeout=5) == 27.0


def test_set_num_threads_rejects_what_is_not_a_positive_integer() -> None:
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="positive integer"):
            serve.set_num_threads(bad)  # type: ignore[arg-type]


def test_numpy_openblas_runs_one_thread_under_the_lanes() -> None:
    if not cpu_threads.blas_controlled():
        pytest.skip("numpy here is not built on OpenBLAS")
    with open("/proc/self/maps") as maps:
        paths = maps.read().split()
    for path in paths:
        if "openblas" in path and ".so" in path:
            lib = ctypes.CDLL(path)
            getter = getattr(lib, "scipy_openblas_get_num_threads64_", None) or lib.openblas_get_num_threads
            getter.restype = ctypes.c_int
            assert getter() == 1
            return
    pytest.fail("blas_controlled() but no OpenBLAS is loaded")


PRODUCTS = [
    ((300, 64), (64, 2000)),  # column blocks
    ((2000, 64), (64, 40)),  # narrow: row blocks
    ((4, 100, 64), (64, 700)),  # leading dims flattened
    ((6, 200, 64), (6, 64, 300)),  # shared batch dims
    ((1, 300, 64), (1, 64, 900)),  # one matrix in the batch
    ((6, 200, 64), (1, 64, 300)),  # broadcast: one np.matmul
    ((3, 0, 64), (64, 5)),  # empty
]


@pytest.mark.usefixtures("lanes")
@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize(("sa", "sb"), PRODUCTS)
def test_split_products_equal_numpy(count: int, sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    serve.set_num_threads(count)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    got = cpu_blas.matmul(a, b)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    ints = cpu_blas.matmul(np.ones((600, 600), np.int64), np.ones((600, 600), np.int64))  # not BLAS: unsplit
    assert ints.dtype == np.int64 and (ints == 600).all()


CONVS = [  # (x shape, w shape, stride, padding, groups, bias)
    ((1, 8, 40, 40), (16, 8, 3, 3), 1, 1, 1, True),  # one sample: rows
    ((1, 8, 200, 200), (4, 8, 3, 3), 1, 1, 1, True),  # one sample, row blocks
    ((1, 8, 20, 20), (32, 8, 1, 1), 2, 0, 1, True),  # one sample 1x1: output channels
    ((1, 8, 20, 20), (8, 2, 1, 1), 1, 0, 4, True),  # grouped 1x1, one sample: inline
    ((1, 8, 20, 20), (8, 1, 3, 3), 1, 1, 8, True),  # depthwise, one sample: inline
    ((1, 8, 20, 20), (16, 4, 3, 3), 2, 1, 2, True),  # grouped 3x3, one sample: rows
    ((5, 8, 20, 20), (16, 8, 3, 3), 2, 1, 1, False),  # samples
    ((3, 8, 20, 20), (16, 4, 3, 3), 1, 1, 2, True),  # grouped, samples
    ((3, 8, 20, 20), (16, 1, 3, 3), 1, 1, 8, False),  # depthwise multiplier 2, samples
    ((4, 3, 120, 120), (8, 3, 7, 7), 2, 3, 1, True),  # ResNet's stem shape, row blocks per sample
]


@pytest.mark.usefixtures("lanes")
@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize(("sx", "sw", "stride", "pad", "groups", "bias"), CONVS)
def test_convolution_on_lanes_equals_one_lane(count: int, sx: tuple[int, ...], sw: tuple[int, ...], stride: int,
                                               pad: int, groups: int, bias: bool) -> None:  # fmt: skip
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal(sx, dtype=np.float32), rng.standard_normal(sw, dtype=np.float32)
    b = rng.standard_normal(sw[0], dtype=np.float32) if bias else None
    args = ((stride, stride), (pad,) * 4, (1, 1), groups)
    serve.set_num_threads(1)
    want = cpu_conv.conv2d(x, w, b, *args)
    serve.set_num_threads(count)
    got = cpu_conv.conv2d(x, w, b, *args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("lanes")
@pytest.mark.parametrize("shape", [(4, 16, 64, 64), (1, 64, 64, 64), (3, 5)])
def test_elementwise_kernels_on_lanes_equal_numpy(shape: tuple[int, ...]) -> None:
    serve.set_num_threads(3)
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape, dtype=np.float32)
    c = shape[1]
    mean, var = rng.standard_normal(c, dtype=np.float32), rng.random(c, dtype=np.float32) + 0.5
    w, b = rng.standard_normal(c, dtype=np.float32), rng.standard_normal(c, dtype=np.float32)
    got = cpu_nn.batch_norm_eval(x, mean, var, w, b, 1e-5)
    bshape = (-1,) + (1,) * (x.ndim - 2)
    scale = (w / np.sqrt(var + np.float32(1e-5))).reshape(bshape)
    np.testing.assert_allclose(got, (x - mean.reshape(bshape)) * scale + b.reshape(bshape), rtol=1e-5, atol=1e-5)
    relu = x.copy()
    assert cpu_nn.relu_(relu) is relu
    np.testing.assert_array_equal(relu, np.maximum(x, 0))
    if x.ndim == 4:
        pooled, _ = cpu_pool.max_pool2d(x, (3, 3), (2, 2), (1, 1), (1, 1), (32, 32), False)
        plain, _ = cpu_pool.max_pool2d(x, (3, 3), (2, 2), (1, 1), (1, 1), (32, 32), True)
        np.testing.assert_array_equal(pooled, plain)


@pytest.mark.usefixtures("lanes")
@pytest.mark.parametrize("count", [1, 2])
def test_empty_batches_keep_their_shapes(count: int) -> None:
    serve.set_num_threads(count)
    x = np.zeros((0, 4, 8, 8), np.float32)
    for k, size in ((1, 8), (3, 6)):
        y = cpu_conv.conv2d(x, np.ones((5, 4, k, k), np.float32), np.ones(5, np.float32), (1, 1), (0,) * 4, (1, 1), 1)
        assert y.shape == (0, 5, size, size) and y.dtype == np.float32
    assert cpu_nn.batch_norm_eval(x, np.zeros(4), np.ones(4), None, None, 1e-5).shape == x.shape
    assert cpu_pool.max_pool2d(x, (2, 2), (2, 2), (0, 0), (1, 1), (4, 4), False)[0].shape == (0, 4, 4, 4)


@pytest.mark.usefixtures("lanes")
@pytest.mark.parametrize("scale", [1.0, 100.0])  # one global shift; a spread too wide for it: row maxima
def test_softmax_on_lanes_equals_the_whole_computation(scale: float) -> None:
    serve.set_num_threads(2)
    a = (np.random.default_rng(3).standard_normal((4, 6, 64, 128)) * scale).astype(np.float32)
    shift = ops_cpu._shift(a, -1)
    want = np.exp(a - shift)
    want /= want.sum(-1, keepdims=True)
    np.testing.assert_array_equal(ops_cpu.softmax(a, -1), want)
    np.testing.assert_array_equal(ops_cpu.softmax(a, 3), want)
    e = np.exp(a.astype(np.float64) - a.max(1, keepdims=True))  # another axis: unsplit
    np.testing.assert_allclose(ops_cpu.softmax(a, 1), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-30)


@pytest.mark.usefixtures("lanes")
def test_changing_the_thread_count_stops_the_old_lanes() -> None:
    out = np.zeros(12)
    for count in (3, 2, 4, 2, 3, 2, 4, 3, 2) * 3:
        serve.set_num_threads(count)
        cpu_threads.parallel(partial(_fill, out, count), cpu_threads.spans(12))
        assert (out == count).all()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lanes = [t for t in threading.enumerate() if t.name.startswith("serve-lane-")]
        if len(lanes) == 1:  # only the current lanes' one helper thread is left
            break
        time.sleep(0.05)
    assert len(lanes) == 1, [t.name for t in lanes]


UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide}


@pytest.mark.parametrize("name", list(UFUNCS))
def test_binary_in_place_on_lanes_equals_one_ufunc(name, lanes):
    """`a op= b` in blocks on the lanes gives one numpy ufunc's bits: a channels-last array and a same-laid-out
    operand (split), an operand laid out otherwise and a scalar (the same answer either way)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 48, 48, 64)).astype(np.float32).transpose(0, 3, 1, 2)  # NCHW view of NHWC memory
    b = (rng.standard_normal((4, 48, 48, 64)).astype(np.float32) + 3).transpose(0, 3, 1, 2)
    op = UFUNCS[name]
    serve.set_num_threads(2)
    for operand in (b, np.ascontiguousarray(b), 2.5):
        target = a.copy(order="K")
        want = op(target, operand)
        assert cpu_nn.binary_(name, target, operand) is target
        np.testing.assert_array_equal(target, want)
