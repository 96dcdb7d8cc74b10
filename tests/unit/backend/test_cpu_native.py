"""serve.backend.cpu_native against float64 numpy references (and torch's conv2d when installed): convolution,
GEMM and depthwise shapes, every fused epilogue, output spans that split rows and samples, each build the CPU runs,
input validation, and the fallback when the kernels are off."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from serve.backend import cpu_native as cn
from serve.backend import cpu_threads

from .conftest import BUILDS

needs_native = pytest.mark.skipif(not BUILDS, reason="no native kernel build for this CPU")
_erf = np.frompyfunc(math.erf, 1, 1)
REF_ACT = {
    "none": lambda v: v,
    "relu": lambda v: np.maximum(v, 0),
    "relu6": lambda v: np.clip(v, 0, 6),
    "gelu": lambda v: 0.5 * v * (1 + _erf(v / math.sqrt(2)).astype(np.float64)),
    "gelu_tanh": lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))),
    "silu": lambda v: v / (1 + np.exp(-v)),
    "hardswish": lambda v: v * np.clip(v + 3, 0, 6) / 6,
    "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
}


def assert_spans_match_whole(run, whole):
    """`run(out, (p0, p1))` over spans of the 105 output pixels (mid-row, across samples, one pixel, to the end),
    and over two lanes, writes exactly `whole`."""
    pieces = np.full_like(whole, np.nan)
    for span in [(0, 5), (5, 38), (38, 40), (40, 41), (41, 105)]:
        run(pieces, span)
    np.testing.assert_array_equal(pieces, whole)
    lanes = np.full_like(whole, np.nan)
    cpu_threads.parallel(lambda a, b: run(lanes, (a, b)), cpu_threads.spans(105, 2))
    np.testing.assert_array_equal(lanes, whole)


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def ref_conv(x, w, stride, padding, dilation, depthwise=False):
    """float64 NHWC convolution; w is PyTorch's (OC, IC, KH, KW) or (C, 1, KH, KW) when depthwise."""
    (sh, sw), (pt, pb, pl, pr), (dh, dw) = stride, padding, dilation
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    oc, _, kh, kw = w.shape
    oh = (xp.shape[1] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[2] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((x.shape[0], oh, ow, oc))
    for ky in range(kh):
        for kx in range(kw):
            win = xp[:, ky * dh : ky * dh + (oh - 1) * sh + 1 : sh, kx * dw : kx * dw + (ow - 1) * sw + 1 : sw, :]
            tap = w[:, :, ky, kx].astype(np.float64)  # (OC, IC) or (C, 1)
            out += win * tap[:, 0] if depthwise else win @ tap.T
    return out


def assert_close(out, ref, rtol=1e-5):
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(out.astype(np.float64) - ref).max())
    assert err <= rtol * scale, f"max error {err:.3g} vs scale {scale:.3g}"


CONV_CASES = [
    # (N, H, W, C, OC, kernel, stride, padding (t, b, l, r), dilation)
    (1, 9, 7, 3, 17, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    (3, 11, 10, 17, 33, (5, 5), (2, 2), (2, 1, 0, 2), (1, 1)),
    (1, 12, 13, 33, 40, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
    (3, 8, 8, 16, 64, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    (1, 15, 15, 3, 24, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),
    (3, 7, 9, 64, 31, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    (1, 5, 6, 20, 5, (3, 1), (1, 2), (0, 1, 1, 0), (1, 1)),
]


@needs_native
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_matches_float64(build, case):
    rng = np.random.default_rng(1)
    nb, h, w, c, oc, kernel, stride, padding, dilation = case
    x, wt, bias = _rand(rng, nb, h, w, c), _rand(rng, oc, c, *kernel), _rand(rng, oc)
    ref = ref_conv(x, wt, stride, padding, dilation)
    res = _rand(rng, *ref.shape)
    packed = cn.pack_conv_weight(wt)
    assert_close(cn.conv2d_nhwc(x, packed, kernel, stride, padding, dilation), ref)
    out = cn.conv2d_nhwc(x, packed, kernel, stride, padding, dilation, bias=bias, residual=res, act="relu")
    assert_close(out, np.maximum(ref + bias + res, 0))


@needs_native
def test_conv2d_pixel_spans_split_rows_and_samples(build):
    rng = np.random.default_rng(2)
    x, wt, bias = _rand(rng, 3, 9, 7, 17), _rand(rng, 33, 17, 3, 3), _rand(rng, 33)
    packed = cn.pack_conv_weight(wt)
    args = ((3, 3), (2, 1), (1, 1, 1, 1), (1, 1))
    res = _rand(rng, 3, 5, 7, 33)
    whole = cn.conv2d_nhwc(x, packed, *args, bias=bias, residual=res, act="silu")
    assert_spans_match_whole(lambda out, span: cn.conv2d_nhwc(x, packed, *args, bias=bias, residual=res, act="silu",
                                                              out=out, pixels=span), whole)  # fmt: skip


@needs_native
@pytest.mark.parametrize("act", cn.ACTIVATIONS)
def test_activations_elementwise(build, act):
    """gemm by the identity is exact, so this checks each activation per element against float64."""
    v = np.concatenate([[-100, -30, -1e-4, 0, 1e-4, 30, 100], np.linspace(-12, 12, 2072)]).astype(np.float32)
    a = v.reshape(-1, 21)  # (99, 21)
    packed = cn.pack_weight(np.eye(21, dtype=np.float32))
    out = cn.gemm(a, packed, act=act)
    ref = REF_ACT[act](a.astype(np.float64)).astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


@needs_native
@pytest.mark.parametrize("act", cn.ACTIVATIONS)
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("with_res", [False, True])
def test_gemm_epilogues(build, act, with_bias, with_res):
    rng = np.random.default_rng(3)
    a, w = _rand(rng, 29, 50), _rand(rng, 50, 37) * 0.2
    bias, res = _rand(rng, 37), _rand(rng, 29, 37)
    ref = a.astype(np.float64) @ w + (bias if with_bias else 0) + (res if with_res else 0)
    out = cn.gemm(a, cn.pack_weight(w), bias=bias if with_bias else None, residual=res if with_res else None, act=act)
    np.testing.assert_allclose(out, REF_ACT[act](ref).astype(np.float64), rtol=1e-5, atol=2e-6)


@needs_native
@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (13, 3, 16), (100, 257, 65), (25, 4800, 40)])
def test_gemm_shapes_row_stride_and_rows(build, m, k, n):
    rng = np.random.default_rng(4)
    wide, w = _rand(rng, m, k + 5), _rand(rng, k, n)
    a = wide[:, :k]  # a row stride of k + 5
    ref = a.astype(np.float64) @ w
    packed = cn.pack_weight(w)
    assert_close(cn.gemm(a, packed), ref)
    out = np.full((m, n), np.nan, np.float32)
    mid = m // 2
    cn.gemm(a, packed, out=out, rows=(0, mid))
    cn.gemm(a, packed, out=out, rows=(mid, m))
    assert_close(out, ref)


DW_CASES = [
    # (N, H, W, C, kernel, stride, padding, dilation)
    (1, 9, 8, 17, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    (3, 10, 11, 96, (3, 3), (2, 2), (0, 1, 1, 0), (1, 1)),
    (1, 12, 12, 33, (5, 5), (1, 2), (4, 4, 3, 4), (2, 2)),
    (1, 7, 7, 144, (7, 7), (1, 1), (3, 3, 3, 3), (1, 1)),
]


@needs_native
@pytest.mark.parametrize("case", DW_CASES)
def test_depthwise_matches_float64(build, case):
    rng = np.random.default_rng(5)
    nb, h, w, c, kernel, stride, padding, dilation = case
    x, wt, bias = _rand(rng, nb, h, w, c), _rand(rng, c, 1, *kernel), _rand(rng, c)
    ref = ref_conv(x, wt, stride, padding, dilation, depthwise=True)
    res = _rand(rng, *ref.shape)
    assert_close(cn.depthwise_nhwc(x, wt, kernel, stride, padding, dilation), ref)
    out = cn.depthwise_nhwc(x, wt, kernel, stride, padding, dilation, bias=bias, residual=res, act="relu6")
    assert_close(out, np.clip(ref + bias + res, 0, 6))
    total = ref.shape[0] * ref.shape[1] * ref.shape[2]
    pieces = np.full(ref.shape, np.nan, np.float32)
    for span in [(0, 3), (3, total - 1), (total - 1, total)]:
        cn.depthwise_nhwc(x, wt, kernel, stride, padding, dilation, bias=bias, residual=res, act="relu6",
                          out=pieces, pixels=span)  # fmt: skip
    np.testing.assert_array_equal(pieces, out)


@pytest.mark.torch
@needs_native
@pytest.mark.parametrize("act", cn.ACTIVATIONS)
def test_conv2d_matches_torch(build, act):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    x, wt, bias = _rand(rng, 2, 10, 9, 17), _rand(rng, 24, 17, 3, 3) * 0.1, _rand(rng, 24)
    res = _rand(rng, 2, 5, 5, 24)
    t = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(wt),
                                   torch.from_numpy(bias), stride=2, padding=1, dilation=1)  # fmt: skip
    t = t.permute(0, 2, 3, 1) + torch.from_numpy(res)
    fn = {"none": lambda v: v, "relu": torch.relu, "relu6": torch.nn.functional.relu6,
          "gelu": torch.nn.functional.gelu, "gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh"),
          "silu": torch.nn.functional.silu, "hardswish": torch.nn.functional.hardswish,
          "sigmoid": torch.sigmoid}[act]  # fmt: skip
    out = cn.conv2d_nhwc(x, cn.pack_conv_weight(wt), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), bias=bias, residual=res,
                         act=act)  # fmt: skip
    np.testing.assert_allclose(out, fn(t).numpy(), rtol=1e-5, atol=1e-6)


@needs_native
def test_bad_input_raises_value_error(build):
    rng = np.random.default_rng(7)
    x, packed = _rand(rng, 1, 5, 5, 4), cn.pack_conv_weight(_rand(rng, 8, 4, 3, 3))
    geo = ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1))
    with pytest.raises(ValueError, match="float32"):
        cn.conv2d_nhwc(x.astype(np.float64), packed, *geo)
    with pytest.raises(ValueError, match="C-contiguous"):
        cn.conv2d_nhwc(np.asfortranarray(x), packed, *geo)
    with pytest.raises(ValueError, match="packed K"):
        cn.conv2d_nhwc(_rand(rng, 1, 5, 5, 3), packed, *geo)
    with pytest.raises(ValueError, match="shape"):
        cn.conv2d_nhwc(x, packed, *geo, bias=_rand(rng, 7))
    with pytest.raises(ValueError, match="span"):
        cn.conv2d_nhwc(x, packed, *geo, pixels=(0, 26))
    with pytest.raises(ValueError, match="activation"):
        cn.conv2d_nhwc(x, packed, *geo, act="tanh")
    with pytest.raises(ValueError, match="out"):
        cn.conv2d_nhwc(x, packed, *geo, out=np.empty((1, 5, 5, 9), np.float32))
    with pytest.raises(ValueError, match="K="):
        cn.gemm(_rand(rng, 3, 5), packed)
    with pytest.raises(ValueError, match="shape"):
        cn.depthwise_nhwc(x, _rand(rng, 4, 1, 5, 5), *geo)


def test_disabled_by_environment():
    code = "from serve.backend import cpu_native as c; print(c.available(), c.isa())"
    env = dict(os.environ, SERVE_NATIVE="0")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "None"]


def test_fallback_when_unavailable():
    previous = cn._select(None)
    try:
        assert not cn.available() and cn.isa() is None
        with pytest.raises(RuntimeError, match="not available"):
            cn.pack_weight(np.ones((2, 2), np.float32))
    finally:
        if previous is not None:
            cn._select(previous)
    with pytest.raises(ValueError, match="not available"):
        cn._select("sse9")
