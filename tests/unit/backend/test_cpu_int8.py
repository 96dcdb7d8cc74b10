"""serve.backend.cpu_int8: weight-only int8 products (sk_w8.c) on each build and in the numpy fallback, against a
float64 product with the dequantised weight; and the quantisation itself (per-column scales, the rounding bound)."""

import numpy as np
import pytest

from serve.backend import cpu_int8, cpu_native

from .conftest import BUILDS

ROWS = [1, 2, 5, 6, 7, 8, 9, 13, 16, 17, 64]  # every row block of either build (8 on AVX-512, 6 on AVX2) and tails


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _err(out, ref):
    return float(np.abs(out.astype(np.float64) - ref).max()) / max(1.0, float(np.abs(ref).max()))


def _act(v, act):
    if act == "relu":
        return np.maximum(v, 0)
    if act == "gelu_tanh":
        return 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3)))
    if act == "silu":
        return v / (1 + np.exp(-v))
    return v


def test_quantize_is_per_column_symmetric_within_half_a_step():
    rng = np.random.default_rng(0)
    w = _rand(rng, 50, 70) * np.linspace(0.01, 3, 70, dtype=np.float32)  # columns of very different ranges
    w[:, 3] = 0  # a column of zeros: scale 1, products 0
    qw = cpu_int8.quantize_weight(w)
    deq = cpu_int8.dequantize(qw)
    scale = qw.scale[:70]
    assert np.all(np.abs(deq - w) <= scale / 2 + 1e-7)
    assert np.allclose(np.abs(deq).max(axis=0)[np.arange(70) != 3], np.abs(w).max(axis=0)[np.arange(70) != 3])
    assert scale[3] == 1 and not deq[:, 3].any()
    big = np.ones((768, 2304), np.float32)  # a GPT-2 c_attn: whole panels, a quarter of the bytes and the scales
    assert cpu_int8.quantize_weight(big).data.dtype == np.int8
    assert cpu_int8.quantize_weight(big).nbytes == big.nbytes // 4 + 2304 * 4


def test_quantize_refuses_what_int8_cannot_hold():
    with pytest.raises(ValueError, match="NaN or infinity"):
        cpu_int8.quantize_weight(np.array([[1.0, np.inf]], np.float32))
    with pytest.raises(ValueError, match="non-empty"):
        cpu_int8.quantize_weight(np.zeros((0, 4), np.float32))


@pytest.mark.skipif(not BUILDS, reason="no native kernel build for this CPU")
@pytest.mark.parametrize("m", ROWS)
def test_gemm_every_row_block_and_edge_panel(build, m):
    assert cpu_int8.available()
    rng = np.random.default_rng(m)
    k, n = 67, 3 * 32 + 5  # whole panels of either width, and an edge panel
    a, w, bias, res = _rand(rng, m, k), _rand(rng, k, n), _rand(rng, n), _rand(rng, m, n)
    qw = cpu_int8.quantize_weight(w)
    deq = cpu_int8.dequantize(qw).astype(np.float64)
    assert _err(cpu_int8.gemm(a, qw, bias, residual=res, bf16=False), a @ deq + bias + res) <= 1e-5
    for act in cpu_int8.ACTIVATIONS:
        assert _err(cpu_int8.gemm(a, qw, bias, act=act, bf16=False), _act(a @ deq + bias, act)) <= 1e-5, act


@pytest.mark.skipif(not BUILDS, reason="no native kernel build for this CPU")
@pytest.mark.parametrize("m", [16, 17, 40])
def test_prefill_rows_widen_panel_groups_for_the_fp32_kernel(build, m):
    """Past 16 rows the panels are widened in groups of at most 256 KiB (here one panel each: K=2100) and the fp32
    kernel multiplies: the same product, epilogue included, across group boundaries and the edge panel."""
    rng = np.random.default_rng(m)
    k, n = 2100, 101
    a, w, bias, res = _rand(rng, m, k), _rand(rng, k, n), _rand(rng, n), _rand(rng, m, n)
    qw = cpu_int8.quantize_weight(w)
    deq = cpu_int8.dequantize(qw).astype(np.float64)
    assert _err(cpu_int8.gemm(a, qw, bias, residual=res, bf16=False), a @ deq + bias + res) <= 1e-5
    assert _err(cpu_int8.gemm(a, qw, bias, act="gelu_tanh", bf16=False), _act(a @ deq + bias, "gelu_tanh")) <= 1e-5


@pytest.mark.skipif(not BUILDS, reason="no native kernel build for this CPU")
@pytest.mark.parametrize("m", [5, 20])  # the register kernel, and panels widened for the fp32 one
def test_gemm_writes_only_its_columns_of_a_wider_output(build, m):
    rng = np.random.default_rng(3)
    k, n = 40, 100
    a, w, res = _rand(rng, m, k), _rand(rng, k, n), _rand(rng, m, n + 7)
    qw = cpu_int8.quantize_weight(w[:, 64:])  # a lane's columns 64..100
    out = np.full((m, n + 7), np.nan, np.float32)
    for bf16 in (False, True):  # True: the bf16 route where it is loaded, activations rounded to bf16
        cpu_int8.gemm(a, qw, residual=res[:, 64:n], out=out[:, 64:n], bf16=bf16)
        a_used = cpu_native.round_bf16(a) if bf16 and cpu_int8.bf16_available() else a
        assert _err(out[:, 64:n], a_used @ cpu_int8.dequantize(qw).astype(np.float64) + res[:, 64:n]) <= 1e-5
        assert np.isnan(out[:, :64]).all() and np.isnan(out[:, n:]).all()


def test_numpy_fallback_is_the_same_product(monkeypatch):
    rng = np.random.default_rng(5)
    a, w, bias = _rand(rng, 3, 33), _rand(rng, 33, 45), _rand(rng, 45)
    qw = cpu_int8.quantize_weight(w)
    native = cpu_int8.gemm(a, qw, bias, act="silu")
    monkeypatch.setattr(cpu_native, "library", lambda: None)
    assert not cpu_int8.available()
    fallback = cpu_int8.gemm(a, qw, bias, act="silu")
    assert _err(fallback, _act(a @ cpu_int8.dequantize(qw).astype(np.float64) + bias, "silu")) <= 1e-5
    assert _err(fallback, native.astype(np.float64)) <= 1e-5


def test_bad_arguments_say_what_is_wrong():
    qw = cpu_int8.quantize_weight(np.ones((4, 6), np.float32))
    with pytest.raises(ValueError, match="activation 'gelu'"):
        cpu_int8.gemm(np.ones((2, 4), np.float32), qw, act="gelu")
    with pytest.raises(ValueError, match=r"float32 \(M, 4\)"):
        cpu_int8.gemm(np.ones((2, 5), np.float32), qw)
    with pytest.raises(ValueError, match="bias"):
        cpu_int8.gemm(np.ones((2, 4), np.float32), qw, bias=np.ones(5, np.float32))


@pytest.mark.skipif(not cpu_int8.bf16_available(), reason="no AVX512-BF16 build of the int8 kernel here")
# (9, 8201): past sk_w8.c's 2 MiB DEQUANT_BF16_BYTES at 3 panels, so 2 groups, the second with the edge panel, odd K
@pytest.mark.parametrize(("m", "k"), [(1, 67), (8, 67), (16, 768), (17, 2100), (40, 33), (9, 8201)])
def test_bf16_route_is_the_product_of_bf16_rounded_activations(m, k):
    """The bf16 route (sk_gemm_w8_bf16): exact int8 weights as bf16, the activations rounded to bf16 (nearest
    even), fp32 accumulation, the epilogue after the scale. Against float64 with the rounded activations it is the
    fp32 route's accuracy; against the unrounded ones each product term moves by at most 2^-9 of |a_k w_k|, the
    numeric cost of the route (the fp32 routes' 1e-5 does not hold there)."""
    rng = np.random.default_rng(m * k)
    n = 3 * 32 + 5  # whole panels and an edge panel
    a, w, bias, res = _rand(rng, m, k), _rand(rng, k, n), _rand(rng, n), _rand(rng, m, n)
    qw = cpu_int8.quantize_weight(w)
    deq = cpu_int8.dequantize(qw).astype(np.float64)
    a16 = cpu_native.round_bf16(a).astype(np.float64)
    got = cpu_int8.gemm(a, qw, bias, residual=res, bf16=True)
    assert _err(got, a16 @ deq + bias + res) <= 1e-5
    bound = 2.0**-9 * (np.abs(a.astype(np.float64)) @ np.abs(deq)) + 1e-5 * max(1.0, float(np.abs(got).max()))
    assert np.all(np.abs(got - (a.astype(np.float64) @ deq + bias + res)) <= bound)
    for act in cpu_int8.ACTIVATIONS:
        assert _err(cpu_int8.gemm(a, qw, bias, act=act, bf16=True), _act(a16 @ deq + bias, act)) <= 1e-5, act
    auto = cpu_int8.gemm(a, qw, bias, residual=res)  # None: the bf16 route from BF16_ROWS rows
    exact = cpu_int8.gemm(a, qw, bias, residual=res, bf16=False)
    np.testing.assert_array_equal(auto, got if m >= cpu_int8.BF16_ROWS else exact)
