"""Winograd F(2x2, 3x3) and F(4x4, 3x3) (serve.backend.cpu_native.winograd_nhwc) against PyTorch's convolution,
per build: odd sizes (partial blocks at the edges), channels off the vector width, asymmetric padding, the epilogue
(bias, residual, activation), split tile spans, and the weights it refuses."""

import numpy as np
import pytest

from serve.backend import cpu_native as cn
from tests.helpers import needs_torch, torch

CASES = [(2, 7, 9, 5, 7, (1, 1, 1, 1)), (1, 14, 14, 64, 64, (1, 1, 1, 1)), (3, 8, 8, 33, 40, (0, 0, 0, 0)),
         (2, 5, 6, 16, 17, (2, 1, 0, 2)), (1, 3, 3, 200, 3, (1, 1, 1, 1))]  # fmt: skip


def _reference(x, w, b, pad):
    t, bottom, left, right = pad
    xt = torch.nn.functional.pad(torch.from_numpy(x).permute(0, 3, 1, 2), (left, right, t, bottom))
    return torch.nn.functional.conv2d(xt, torch.from_numpy(w), torch.from_numpy(b)).permute(0, 2, 3, 1).numpy()


@needs_torch
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("act", ["none", "relu"])
@pytest.mark.parametrize("m", [2, 4])
def test_matches_torch(build, case, act, m):
    nb, h, w, c, oc, pad = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal((nb, h, w, c), dtype=np.float32)
    wt = rng.standard_normal((oc, c, 3, 3), dtype=np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    ref = _reference(x, wt, b, pad)
    res = rng.standard_normal(ref.shape, dtype=np.float32)
    got = cn.winograd_nhwc(x, cn.pack_winograd_weight(wt, m), pad, bias=b, residual=res, act=act)
    want = ref + res if act == "none" else np.maximum(ref + res, 0.0)
    tol = 1e-5 if m == 2 else 3e-5  # F(4x4, 3x3)'s transforms multiply by up to 8 and 1/24
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


@needs_torch
@pytest.mark.parametrize("m", [2, 4])
def test_tile_spans_compose(build, m):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 9, 11, 24), dtype=np.float32)
    wt = rng.standard_normal((20, 24, 3, 3), dtype=np.float32)
    packed = cn.pack_winograd_weight(wt, m)
    whole = cn.winograd_nhwc(x, packed, (1, 1, 1, 1))
    tiles = cn.winograd_tiles(2, 9, 11, m)
    out = np.full_like(whole, np.nan)
    for t0, t1 in [(0, 3), (3, 4), (4, tiles)]:
        cn.winograd_nhwc(x, packed, (1, 1, 1, 1), out=out, tiles=(t0, t1))
    np.testing.assert_array_equal(out, whole)
    ref = _reference(x, wt, np.zeros(20, np.float32), (1, 1, 1, 1))
    np.testing.assert_allclose(whole, ref, rtol=0, atol=(1e-5 if m == 2 else 3e-5) * np.abs(ref).max())


def test_refuses_what_it_cannot_run(build):
    with pytest.raises(ValueError, match="3x3"):
        cn.pack_winograd_weight(np.zeros((4, 4, 5, 5), np.float32))
    with pytest.raises(ValueError, match="m=3"):
        cn.pack_winograd_weight(np.zeros((4, 4, 3, 3), np.float32), 3)
    x = np.zeros((1, 6, 6, 4), np.float32)
    with pytest.raises(ValueError, match="pack_winograd_weight"):
        cn.winograd_nhwc(x, cn.pack_conv_weight(np.zeros((4, 4, 3, 3), np.float32)), (1, 1, 1, 1))
    with pytest.raises(ValueError, match="input channels"):
        cn.winograd_nhwc(x, cn.pack_winograd_weight(np.zeros((4, 5, 3, 3), np.float32)), (1, 1, 1, 1))
