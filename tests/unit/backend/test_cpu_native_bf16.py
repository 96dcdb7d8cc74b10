"""serve.backend.cpu_native's bfloat16 products (the AVX512-BF16 build): packing, rounding, GEMM and convolution
against float64 references computed from the bf16-rounded operands (tight) and from the float32 ones (loose), every
fused epilogue, odd K and odd channels, output spans and lanes. Skipped where the CPU lacks avx512_bf16."""

import os
import subprocess
import sys

import numpy as np
import pytest

from serve.backend import cpu_native as cn

from .test_cpu_native import CONV_CASES, REF_ACT, assert_spans_match_whole, ref_conv

needs_bf16 = pytest.mark.skipif(not cn.bf16_available(), reason="no AVX512-BF16 kernel build for this CPU")
BF = "bfloat16"


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _bf(a):
    return cn.round_bf16(a).astype(np.float64)


def assert_close(out, ref, rtol):
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(out.astype(np.float64) - ref).max())
    assert err <= rtol * scale, f"max error {err:.3g} vs scale {scale:.3g}"


def test_round_bf16_ties_to_even_and_specials():
    one = 1.0
    v = np.array([one, one + 2**-8, one + 3 * 2**-8, one + 2**-8 + 2**-20, -(one + 2**-8), 3.4e38, np.inf, -np.inf,
                  0.0, -0.0, 1e-40], np.float32)  # fmt: skip
    r = cn.round_bf16(v)
    expect = [one, one, one + 2**-6, one + 2**-7, -one, np.inf, np.inf, -np.inf, 0.0, -0.0]
    np.testing.assert_array_equal(r[:10], np.array(expect, np.float32))
    assert np.signbit(r[9]) and r[10] > 0
    assert np.isnan(cn.round_bf16(np.array([np.nan], np.float32)))[0]


@pytest.mark.torch
def test_round_bf16_matches_torch():
    torch = pytest.importorskip("torch")
    v = _rand(np.random.default_rng(0), 10000) * np.float32(10.0) ** np.arange(-20, 20, 0.004, dtype=np.float32)
    ref = torch.from_numpy(v).to(torch.bfloat16).to(torch.float32).numpy()
    np.testing.assert_array_equal(cn.round_bf16(v), ref)


@needs_bf16
@pytest.mark.parametrize(("k", "n"), [(1, 1), (5, 33), (64, 32)])
def test_pack_weight_layout(k, n):
    w = _rand(np.random.default_rng(1), k, n)
    p = cn.pack_weight(w, dtype=BF)
    assert (p.k, p.n, p.nr, p.dtype, p.kpad) == (k, n, 32, BF, k + k % 2)
    assert p.data.dtype == np.uint16 and p.data.shape == (-(-n // 32), (k + 1) // 2, 32, 2)
    back = (p.data.astype(np.uint32) << 16).view(np.float32)  # (panels, K/2, 32, 2)
    full = back.transpose(1, 3, 0, 2).reshape(p.kpad, -1)  # (Kpad, panels * 32)
    np.testing.assert_array_equal(full[:k, :n], cn.round_bf16(w))
    assert not full[k:].any() and not full[:, n:].any()


@needs_bf16
def test_pack_conv_weight_pads_each_tap():
    w = _rand(np.random.default_rng(2), 7, 3, 2, 2)  # OC 7, IC 3 (odd), 2x2
    p = cn.pack_conv_weight(w, dtype=BF)
    assert (p.k, p.kpad) == (12, 16)
    back = (p.data.astype(np.uint32) << 16).view(np.float32)[0].transpose(0, 2, 1).reshape(16, 32)  # (kh, kw, ic)
    taps = back.reshape(4, 4, 32)
    np.testing.assert_array_equal(taps[:, :3, :7], cn.round_bf16(w.transpose(2, 3, 1, 0).reshape(4, 3, 7)))
    assert not taps[:, 3].any()


@needs_bf16
@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (13, 3, 16), (100, 257, 65), (25, 4800, 40), (97, 64, 100)])
def test_gemm_bf16_shapes_row_stride_and_rows(m, k, n):
    rng = np.random.default_rng(4)
    wide, w = _rand(rng, m, k + 5), _rand(rng, k, n)
    a = wide[:, :k]
    packed = cn.pack_weight(w, dtype=BF)
    ref = _bf(a) @ _bf(w)
    out = cn.gemm(a, packed)
    assert_close(out, ref, 1e-5)
    assert_close(out, a.astype(np.float64) @ w, 1e-2)
    split = np.full((m, n), np.nan, np.float32)
    for span in [(0, m // 3), (m // 3, m // 3 + 1), (m // 3 + 1, m)]:
        cn.gemm(a, packed, out=split, rows=span)
    np.testing.assert_array_equal(split, out)


@needs_bf16
@pytest.mark.parametrize("act", cn.ACTIVATIONS)
@pytest.mark.parametrize("with_extras", [False, True])
def test_gemm_bf16_epilogues(act, with_extras):
    rng = np.random.default_rng(3)
    a, w = _rand(rng, 29, 51), _rand(rng, 51, 37) * 0.2
    bias, res = (_rand(rng, 37), _rand(rng, 29, 37)) if with_extras else (None, None)
    extra = (bias + res) if with_extras else 0
    out = cn.gemm(a, cn.pack_weight(w, dtype=BF), bias=bias, residual=res, act=act)
    tight = REF_ACT[act](_bf(a) @ _bf(w) + extra).astype(np.float64)
    np.testing.assert_allclose(out, tight, rtol=1e-5, atol=2e-6)
    loose = REF_ACT[act](a.astype(np.float64) @ w + extra).astype(np.float64)
    assert_close(out, loose, 1e-2)


BIG_CASES = [  # several blocks of 96 pixels, blocks crossing samples: the input converted block by block
    (2, 17, 13, 5, 40, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    (3, 16, 15, 24, 33, (5, 3), (2, 1), (2, 2, 0, 1), (1, 2)),
]


@needs_bf16
@pytest.mark.parametrize("case", CONV_CASES + BIG_CASES)
@pytest.mark.parametrize("act", ["none", "relu", "gelu", "hardswish"])
def test_conv2d_bf16_matches_float64(case, act):
    rng = np.random.default_rng(1)
    nb, h, w, c, oc, kernel, stride, padding, dilation = case
    x, wt, bias = _rand(rng, nb, h, w, c), _rand(rng, oc, c, *kernel), _rand(rng, oc)
    ref = ref_conv(cn.round_bf16(x), cn.round_bf16(wt), stride, padding, dilation)
    res = _rand(rng, *ref.shape)
    packed = cn.pack_conv_weight(wt, dtype=BF)
    out = cn.conv2d_nhwc(x, packed, kernel, stride, padding, dilation, bias=bias, residual=res, act=act)
    assert_close(out, REF_ACT[act](ref + bias + res).astype(np.float64), 1e-5)
    loose = REF_ACT[act](ref_conv(x, wt, stride, padding, dilation) + bias + res).astype(np.float64)
    assert_close(out, loose, 1e-2)


@needs_bf16
@pytest.mark.parametrize("c", [17, 16])
def test_conv2d_bf16_pixel_spans_and_lanes(c):
    rng = np.random.default_rng(2)
    x, wt, bias = _rand(rng, 3, 9, 7, c), _rand(rng, 33, c, 3, 3), _rand(rng, 33)
    packed = cn.pack_conv_weight(wt, dtype=BF)
    args = ((3, 3), (2, 1), (1, 1, 1, 1), (1, 1))
    res = _rand(rng, 3, 5, 7, 33)
    whole = cn.conv2d_nhwc(x, packed, *args, bias=bias, residual=res, act="silu")
    assert_close(whole, REF_ACT["silu"](ref_conv(cn.round_bf16(x), cn.round_bf16(wt), *args[1:]) + bias + res), 1e-5)
    assert_spans_match_whole(lambda out, span: cn.conv2d_nhwc(x, packed, *args, bias=bias, residual=res, act="silu",
                                                              out=out, pixels=span), whole)  # fmt: skip


@needs_bf16
def test_conv2d_bf16_1x1_takes_a_gemm_packing():
    rng = np.random.default_rng(5)
    x, wt = _rand(rng, 2, 5, 6, 9), _rand(rng, 20, 9, 1, 1)
    from_gemm = cn.pack_weight(wt[:, :, 0, 0].T, dtype=BF)
    geo = ((1, 1), (1, 1), (0, 0, 0, 0), (1, 1))
    out = cn.conv2d_nhwc(x, from_gemm, *geo)
    np.testing.assert_array_equal(out, cn.conv2d_nhwc(x, cn.pack_conv_weight(wt, dtype=BF), *geo))
    np.testing.assert_array_equal(out.reshape(-1, 20), cn.gemm(x.reshape(-1, 9), from_gemm))


@needs_bf16
def test_bf16_bad_input_raises_value_error():
    rng = np.random.default_rng(7)
    x, wt = _rand(rng, 1, 5, 5, 3), _rand(rng, 8, 3, 3, 3)
    geo = ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1))
    with pytest.raises(ValueError, match="dtype"):
        cn.pack_weight(wt.reshape(8, -1).T, dtype="float16")
    with pytest.raises(ValueError, match="per-tap"):
        cn.conv2d_nhwc(x, cn.pack_weight(np.ascontiguousarray(wt.transpose(2, 3, 1, 0).reshape(27, 8)), BF), *geo)
    with pytest.raises(ValueError, match="per tap"):
        cn.gemm(_rand(rng, 4, 27), cn.pack_conv_weight(wt, BF))
    with pytest.raises(ValueError, match="float32"):
        cn.conv2d_nhwc(x.astype(np.float64), cn.pack_conv_weight(wt, BF), *geo)
    bad = cn.pack_weight(_rand(rng, 27, 8), BF)
    bad.nr = 16
    with pytest.raises(ValueError, match="panels"):
        cn.gemm(_rand(rng, 4, 27), bad)


def test_bf16_off_with_the_native_kernels():
    previous = cn._select(None)
    try:
        assert not cn.bf16_available()
        with pytest.raises(RuntimeError, match="not available"):
            cn.pack_weight(np.ones((2, 2), np.float32), dtype=BF)
    finally:
        if previous is not None:
            cn._select(previous)
    code = "from serve.backend import cpu_native as c; print(c.bf16_available())"
    env = dict(os.environ, SERVE_NATIVE="0")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False"]
