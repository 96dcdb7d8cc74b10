"""The CUDA backend against the CPU backend: every primitive on the same inputs, then devices and memory.

Every public name of `ops_cpu` runs through `ops_cases.CASES` on float32, float16 and bfloat16: the same numpy
inputs go to `ops_cpu` and (copied over) to `ops_cuda`; results must have the same dtype and shape and agree
within 1e-4 relative for float32 (exactly for integers, bools and data movement) and 1e-2 for half precision.
Float32 convolutions are compared with TF32 off (PyTorch's `allow_tf32` default for convolutions is True, and
TF32 rounds inputs to 10 mantissa bits). Skipped without a GPU (tests/conftest.py).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

import serve
from serve.backend import flags, ops_cpu
from tests.gpu import ops_cases as C

if not serve.cuda.is_available():  # CuPy installed without a GPU: importing ops_cuda would raise RuntimeError
    pytest.skip("needs an NVIDIA GPU with CuPy", allow_module_level=True)
cupy = pytest.importorskip("cupy")
from serve.backend import ops_cuda  # noqa: E402

SEED = 1234
EXACT = {"neg", "abs", "sign", "floor", "ceil", "trunc", "round", "isnan", "isinf", "isfinite", "logical_not",
         "bitwise_not", "maximum", "minimum", "fmax", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
         "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "where", "clip", "relu", "relu_",
         "amax", "amin", "argmax", "argmin", "any", "all", "reshape", "moveaxis", "transpose", "broadcast_to",
         "concatenate", "stack", "flip", "roll", "tril", "triu", "take", "take_along_axis", "nonzero", "pad",
         "copyto", "sort", "topk", "asarray", "array", "zeros", "ones", "full", "eye", "ascontiguousarray",
         "astype", "hardtanh", "leaky_relu", "threshold", "bag_ids", "bag_counts", "bag_positions", "gather_planes",
         "max_pool2d", "adaptive_max_pool2d", "pad_plan", "nearest_plan", "linear_plan", "adaptive_avg_matrix",
         "integers", "permutation", "bernoulli", "dropout_mask", "uniform", "linspace", "arange"}  # fmt: skip


@pytest.fixture(autouse=True)
def _strict_fp32():
    saved = flags.conv_allow_tf32, flags.matmul_allow_tf32
    flags.conv_allow_tf32 = flags.matmul_allow_tf32 = False
    yield
    flags.conv_allow_tf32, flags.matmul_allow_tf32 = saved


def _to_device(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return ops_cuda.from_numpy(v)
    if isinstance(v, tuple):
        return tuple(_to_device(x) for x in v)
    if isinstance(v, list):
        return [_to_device(x) for x in v]
    return v


def _to_host(v: Any) -> Any:
    if isinstance(v, cupy.ndarray):
        return ops_cuda.to_numpy(v)
    if isinstance(v, (tuple, list)):
        return type(v)(_to_host(x) for x in v)
    return v


def _prepare(ops: Any, args: tuple, dt: np.dtype) -> list:
    out = []
    for a in args:
        if isinstance(a, str) and a == "gen":
            a = ops.generator(SEED)
        elif isinstance(a, tuple) and a and isinstance(a[0], str) and a[0] == "plan":
            a = C.plan_for(ops, a, dt)
        out.append(a)
    return out


def _tolerance(name: str, dt: np.dtype) -> tuple[float, float]:
    if name in EXACT:
        return 0.0, 0.0
    if dt in (C.F16, C.BF16):
        return 1e-2, 1e-2
    return 1e-4, 1e-5


def _compare(name: str, got: Any, want: Any, dt: np.dtype) -> None:
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), name
        for g, w in zip(got, want):
            _compare(name, g, w, dt)
        return
    if want is None:
        assert got is None, name
        return
    want = np.asarray(want)
    assert isinstance(got, np.ndarray), f"{name}: got {type(got).__name__}"
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
    rtol, atol = _tolerance(name, dt)
    g64, w64 = _plain(got), _plain(want)
    if rtol == 0:
        np.testing.assert_array_equal(g64, w64, err_msg=name)  # NaN equals NaN here
        return
    finite = np.abs(w64[np.isfinite(w64)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    np.testing.assert_allclose(g64, w64, rtol=rtol, atol=atol * scale, equal_nan=True, err_msg=name)


def _plain(a: np.ndarray) -> np.ndarray:
    """Floats as float64 (numpy's testing helpers do not all know bfloat16); others unchanged."""
    return a.astype(np.float64) if a.dtype.kind == "f" or a.dtype == C.BF16 else a


def _cases() -> list[Any]:
    out = []
    for name, makers in C.CASES.items():
        dts = (C.F32,) if name in C.FIXED_DTYPE else C.FLOATS
        for i, _ in enumerate(makers):
            out += [pytest.param(name, i, dt, id=f"{name}-{i}-{dt.name}") for dt in dts]
    return out


@pytest.mark.parametrize(("name", "case", "dt"), _cases())
def test_primitive_matches_cpu(name: str, case: int, dt: np.dtype) -> None:
    args = C.CASES[name][case](dt)
    cpu_args = _prepare(ops_cpu, args, dt)
    gpu_args = _prepare(ops_cuda, _to_device(args), dt)
    want = getattr(ops_cpu, name)(*cpu_args)
    got = getattr(ops_cuda, name)(*gpu_args)
    if name in C.MUTATES:
        i = C.MUTATES[name]
        want, got = cpu_args[i], gpu_args[i]
    _compare(name, _to_host(got), want, dt)


def test_every_cpu_primitive_has_a_case_and_exists_on_cuda() -> None:
    public = {n for n in dir(ops_cpu) if not n.startswith("_") and callable(getattr(ops_cpu, n))}
    public -= {"Any"}
    missing = {n for n in public if not hasattr(ops_cuda, n)}
    assert not missing, f"ops_cuda lacks {sorted(missing)}"


# ---- the names that are not plain array functions ------------------------------------------------------
def test_transfers_round_trip_exactly_through_pinned_memory() -> None:
    for dt in C.FLOATS + (np.dtype(np.int64), np.dtype(np.bool_)):
        for shape in ((3, 4), (512, 1024)):  # below and above the pinned-staging threshold
            a = (np.random.default_rng(0).standard_normal(shape) * 10).astype(dt)
            d = ops_cuda.from_numpy(a)
            assert isinstance(d, cupy.ndarray) and d.dtype == a.dtype
            back = ops_cuda.to_numpy(d)
            assert type(back) is np.ndarray and back.dtype == a.dtype
            np.testing.assert_array_equal(back.view(np.uint8), a.view(np.uint8))
    t = ops_cuda.to_numpy(ops_cuda.from_numpy(np.arange(12.0).reshape(3, 4)).T)  # non-contiguous source
    np.testing.assert_array_equal(t, np.arange(12.0).reshape(3, 4).T)


def test_view_strides_contiguity_empty_and_printing() -> None:
    a = ops_cuda.from_numpy(np.arange(24.0, dtype=np.float32).reshape(2, 3, 4))
    assert ops_cuda.strides(a) == (12, 4, 1) and ops_cuda.is_contiguous(a)
    assert ops_cuda.view(a, (6, 4)).shape == (6, 4)
    assert ops_cuda.view(a.transpose(2, 0, 1), (24,)) is None
    assert not ops_cuda.is_contiguous(a.T)
    assert ops_cuda.shares_memory(a, a[1]) and not ops_cuda.shares_memory(a, a.copy())
    e = ops_cuda.empty((2, 3), C.BF16)
    assert e.shape == (2, 3) and e.dtype == C.BF16
    assert ops_cuda.array2string(a[0, 0]) == ops_cpu.array2string(np.arange(4.0, dtype=np.float32))
    assert ops_cuda.ndarray is cupy.ndarray


def test_on_device_and_current_device() -> None:
    assert ops_cpu.on_device(None).__enter__() is None
    with ops_cuda.on_device(0):
        assert ops_cuda.current_device() == 0
        assert ops_cuda.zeros((2,), np.float32).device.id == 0


# ---- devices through the tensor layer ------------------------------------------------------------------
def test_to_cuda_round_trip_is_exact_and_reports_the_index() -> None:
    for dt in (serve.float32, serve.float16, serve.bfloat16, serve.int64, serve.bool):
        x = serve.randn(4, 5).to(dt) if dt.is_floating_point else serve.tensor([[1, 0], [3, 4]]).to(dt)
        g = x.to("cuda")
        assert g.is_cuda and str(g.device) == f"cuda:{serve.cuda.current_device()}" and g.dtype is dt
        assert g.to("cuda") is g and g.cuda() is g  # already there: no copy
        back = g.cpu()
        assert back.device == serve.device("cpu")
        assert back.tolist() == x.tolist()


def test_mixed_devices_follow_pytorch() -> None:
    """Dimensioned tensors on two devices are an error; a zero-dim CPU tensor joins the other's device."""
    g, c = serve.ones(3, device="cuda"), serve.ones(3)
    for op in (lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a == b, lambda a, b: a < b):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            op(g, c)
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            op(c, g)
    for out in (g + serve.tensor(2.0), serve.tensor(2.0) + g, serve.tensor(2.0) * g, serve.tensor(1.0) == g):
        assert out.is_cuda and out.shape == (3,)
    assert (serve.tensor(2.0) + g).tolist() == [3.0, 3.0, 3.0]


def test_creation_on_device_and_random_values_match_cpu() -> None:
    z = serve.zeros(2, 3, device="cuda")
    assert str(z.device) == "cuda:0" and z.sum().item() == 0
    assert serve.ones(3, device="cuda:0").device == serve.device("cuda", 0)
    assert serve.arange(5, device="cuda").tolist() == [0, 1, 2, 3, 4]
    assert serve.tensor([1.5, 2.5], device="cuda").tolist() == [1.5, 2.5]
    serve.manual_seed(7)
    cpu = serve.randn(3, 4)
    serve.manual_seed(7)
    gpu = serve.randn(3, 4, device="cuda")
    assert gpu.cpu().tolist() == cpu.tolist()


def test_module_moves_and_half_precision_forward() -> None:
    model = serve.nn.Sequential(serve.nn.Linear(8, 16), serve.nn.GELU(), serve.nn.LayerNorm(16), serve.nn.Linear(16, 4))
    x = serve.randn(5, 8)
    with serve.no_grad():
        want = model(x)
        model.cuda()
        assert all(p.is_cuda for p in model.parameters())
        got = model(x.cuda())
        np.testing.assert_allclose(np.asarray(got.cpu()), np.asarray(want), rtol=1e-4, atol=1e-5)
        model.half()
        assert all(p.dtype is serve.float16 for p in model.parameters())
        half = model(x.cuda().half()).float().cpu()
        np.testing.assert_allclose(np.asarray(half), np.asarray(want), rtol=2e-2, atol=2e-2)
        model.bfloat16()
        bf = model(x.cuda().bfloat16()).float().cpu()
        np.testing.assert_allclose(np.asarray(bf), np.asarray(want), rtol=5e-2, atol=5e-2)
        model.cpu()
    assert all(not p.is_cuda for p in model.parameters())


def test_sdpa_uses_the_fused_softmax_and_matches_cpu() -> None:
    F = serve.nn.functional
    q, k, v = (serve.randn(2, 3, 5, 8) for _ in range(3))
    mask = serve.rand(5, 5) > 0.3
    for kw in ({}, {"is_causal": True}, {"attn_mask": mask}):
        want = F.scaled_dot_product_attention(q, k, v, **kw)
        gkw = {key: (val.cuda() if isinstance(val, serve.Tensor) else val) for key, val in kw.items()}
        got = F.scaled_dot_product_attention(q.cuda(), k.cuda(), v.cuda(), **gkw)
        np.testing.assert_allclose(np.asarray(got.cpu()), np.asarray(want), rtol=1e-4, atol=1e-5)


# ---- serve.cuda and memory -----------------------------------------------------------------------------
def test_serve_cuda_api() -> None:
    assert serve.cuda.is_available() and serve.cuda.device_count() >= 1
    serve.cuda.set_device(0)
    assert serve.cuda.current_device() == 0
    with serve.cuda.device(0):
        assert serve.cuda.current_device() == 0
    assert isinstance(serve.cuda.get_device_name(0), str) and serve.cuda.get_device_name()
    assert serve.cuda.get_device_capability(0) >= (7, 0)
    free, total = serve.cuda.mem_get_info()
    assert 0 < free <= total
    serve.cuda.synchronize()
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        serve.cuda.set_device(serve.cuda.device_count())


def test_memory_accounting_and_empty_cache() -> None:
    serve.cuda.empty_cache()
    before = serve.cuda.memory_allocated()
    x = serve.empty(1024, 1024, device="cuda")  # 4 MiB
    assert serve.cuda.memory_allocated() >= before + 4 * 2**20
    del x
    held = serve.cuda.memory_reserved()
    assert held >= serve.cuda.memory_allocated() + 4 * 2**20  # the freed block stays cached in the pool
    serve.cuda.empty_cache()
    assert serve.cuda.memory_allocated() <= serve.cuda.memory_reserved() <= held - 4 * 2**20


def test_memory_fraction_limit_gives_a_memory_error() -> None:
    _, total = serve.cuda.mem_get_info()
    pool = cupy.get_default_memory_pool()
    try:
        serve.cuda.set_per_process_memory_fraction(0.01)
        assert pool.get_limit() == pytest.approx(0.01 * total, rel=1e-3)
        with pytest.raises(MemoryError):
            serve.empty(int(0.02 * total) // 4 + 1, device="cuda")
    finally:
        pool.set_limit(size=0)  # no limit
    serve.empty(1024, device="cuda")  # still usable


def test_tf32_switches_are_pytorch_named() -> None:
    assert serve.backends.cuda.matmul.allow_tf32 is False  # the fixture turned both off for this module
    serve.backends.cudnn.allow_tf32 = True
    assert flags.conv_allow_tf32 is True
    a, b = (serve.randn(256, 256, device="cuda") for _ in range(2))
    strict = (a @ b).cpu()
    serve.backends.cuda.matmul.allow_tf32 = True
    try:
        fast = (a @ b).cpu()
    finally:
        serve.backends.cuda.matmul.allow_tf32 = False
    ref = np.asarray(a.cpu()).astype(np.float64) @ np.asarray(b.cpu()).astype(np.float64)
    assert np.abs(np.asarray(strict) - ref).max() < 1e-3  # fp32 accumulation of 256 products
    assert np.abs(np.asarray(fast) - ref).max() < 1.0  # TF32: 10 mantissa bits, still close
    assert "cupy" in sys.modules
