"""serve.backend.cpu_native.max_pool_nhwc against numpy (and torch's max_pool2d when installed): padding as -inf,
floor mode, channel tails, output spans and lanes, each build the CPU runs."""

import numpy as np
import pytest

from serve.backend import cpu_native as cn
from serve.backend import cpu_threads


def ref_pool(x, kernel, stride, pads):
    (kh, kw), (sh, sw), (pt, pb, pl, pr) = kernel, stride, pads
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=-np.inf)
    oh, ow = (xp.shape[1] - kh) // sh + 1, (xp.shape[2] - kw) // sw + 1
    out = np.full((x.shape[0], oh, ow, x.shape[3]), -np.inf, np.float32)
    for ky in range(kh):
        for kx in range(kw):
            np.maximum(out, xp[:, ky : ky + (oh - 1) * sh + 1 : sh, kx : kx + (ow - 1) * sw + 1 : sw], out=out)
    return out


POOL_CASES = [
    # (N, H, W, C, kernel, stride, padding as passed, padding (t, b, l, r))
    (2, 9, 8, 5, 3, 2, 1, (1, 1, 1, 1)),
    (1, 14, 15, 81, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (3, 8, 8, 64, 2, 2, 0, (0, 0, 0, 0)),
    (1, 7, 6, 16, 3, 1, 1, (1, 1, 1, 1)),
    (2, 10, 9, 33, (3, 2), (1, 2), (0, 2, 1, 0), (0, 2, 1, 0)),
    (1, 12, 11, 7, 5, None, 2, (2, 2, 2, 2)),
]


@pytest.mark.parametrize("case", POOL_CASES)
def test_max_pool_matches_numpy(build, case):
    nb, h, w, c, kernel, stride, padding, pads = case
    x = np.random.default_rng(0).standard_normal((nb, h, w, c)).astype(np.float32) - 10  # all below the 0 pad
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    ref = ref_pool(x, pair(kernel), pair(kernel if stride is None else stride), pads)
    out = cn.max_pool_nhwc(x, kernel, stride, padding)
    np.testing.assert_array_equal(out, ref)
    total = ref.shape[0] * ref.shape[1] * ref.shape[2]
    pieces = np.full_like(ref, np.nan)
    for span in [(0, 1), (1, total // 2 + 1), (total // 2 + 1, total)]:
        cn.max_pool_nhwc(x, kernel, stride, padding, out=pieces, pixels=span)
    np.testing.assert_array_equal(pieces, ref)
    lanes = np.full_like(ref, np.nan)
    cpu_threads.parallel(lambda a, b: cn.max_pool_nhwc(x, kernel, stride, padding, out=lanes, pixels=(a, b)),
                         cpu_threads.spans(total, 2))  # fmt: skip
    np.testing.assert_array_equal(lanes, ref)


@pytest.mark.torch
@pytest.mark.parametrize(("shape", "k", "s", "p"), [((2, 112, 112, 64), 3, 2, 1), ((1, 13, 11, 20), 2, 2, 1)])
def test_max_pool_matches_torch(build, shape, k, s, p):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    t = torch.nn.functional.max_pool2d(torch.from_numpy(x).permute(0, 3, 1, 2), k, s, p).permute(0, 2, 3, 1)
    np.testing.assert_array_equal(cn.max_pool_nhwc(x, k, s, p), t.numpy())


def test_max_pool_bad_input(build):
    x = np.zeros((1, 5, 5, 4), np.float32)
    with pytest.raises(ValueError, match="smaller than the kernel"):
        cn.max_pool_nhwc(x, 3, 1, 3)
    with pytest.raises(ValueError, match="padding is"):
        cn.max_pool_nhwc(x, 3, 1, (1, 1, 1))
    with pytest.raises(ValueError, match="kernel"):
        cn.max_pool_nhwc(x, (3, 3, 3), 1, 1)
    with pytest.raises(ValueError, match="float32"):
        cn.max_pool_nhwc(x.astype(np.float64), 3, 1, 1)
    with pytest.raises(ValueError, match="out"):
        cn.max_pool_nhwc(x, 3, 1, 1, out=np.empty((1, 5, 5, 3), np.float32))
    with pytest.raises(ValueError, match="span"):
        cn.max_pool_nhwc(x, 3, 1, 1, pixels=(0, 26))
