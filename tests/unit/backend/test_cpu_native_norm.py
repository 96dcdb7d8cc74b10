"""serve.backend.cpu_native.layer_norm (sk_norm.c) against a float64 numpy LayerNorm: with and without the residual
add, the affine on and off, row lengths around the vector width, in place, and row spans; each build the CPU runs."""

import numpy as np
import pytest

from serve.backend import cpu_native as cn
from serve.backend import cpu_threads


def _ref(x, res, w, b, eps):
    s = x.astype(np.float64) + (0.0 if res is None else res)
    y = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + eps)
    return y * (1.0 if w is None else w) + (0.0 if b is None else b)


@pytest.mark.parametrize("n", [1, 7, 8, 16, 33, 384])
@pytest.mark.parametrize("with_res", [False, True])
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_layer_norm_matches_float64(build, n, with_res, affine):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((5, 3, n)) * 3 + 2).astype(np.float32)
    res = rng.standard_normal((5, 3, n)).astype(np.float32) if with_res else None
    w = rng.standard_normal(n).astype(np.float32) if affine != "none" else None
    b = rng.standard_normal(n).astype(np.float32) if affine == "both" else None
    out = cn.layer_norm(x, w, b, 1e-5, residual=res)
    ref = _ref(x, res, w, b, 1e-5)
    assert np.abs(out - ref).max() <= 2e-5 * max(1.0, np.abs(ref).max())


def test_layer_norm_in_place_and_row_spans(build):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((37, 100)).astype(np.float32)
    res = rng.standard_normal((37, 100)).astype(np.float32)
    w, b = rng.standard_normal(100).astype(np.float32), rng.standard_normal(100).astype(np.float32)
    whole = cn.layer_norm(x, w, b, 1e-6, residual=res)
    on_x, on_res = x.copy(), res.copy()
    cn.layer_norm(on_x, w, b, 1e-6, residual=res, out=on_x)  # the sum written over x, then normalized there
    cn.layer_norm(x, w, b, 1e-6, residual=on_res, out=on_res)
    np.testing.assert_array_equal(on_x, whole)
    np.testing.assert_array_equal(on_res, whole)
    pieces = np.full_like(whole, np.nan)
    for span in [(0, 1), (1, 20), (20, 20), (20, 37)]:
        cn.layer_norm(x, w, b, 1e-6, residual=res, out=pieces, rows=span)
    np.testing.assert_array_equal(pieces, whole)
    lanes = np.full_like(whole, np.nan)
    cpu_threads.parallel(lambda r0, r1: cn.layer_norm(x, w, b, 1e-6, residual=res, out=lanes, rows=(r0, r1)),
                         cpu_threads.spans(37, 2))  # fmt: skip
    np.testing.assert_array_equal(lanes, whole)


def test_layer_norm_matches_torch(build):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x, res = (rng.standard_normal((4, 9, 384)).astype(np.float32) for _ in range(2))
    ln = torch.nn.LayerNorm(384, eps=1e-12)
    with torch.no_grad():
        ln.weight.normal_(), ln.bias.normal_()
        want = ln(torch.from_numpy(x) + torch.from_numpy(res)).numpy()
    got = cn.layer_norm(x, ln.weight.detach().numpy(), ln.bias.detach().numpy(), 1e-12, residual=res)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_layer_norm_bad_input(build):
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError, match="residual"):
        cn.layer_norm(x, None, None, 1e-5, residual=np.zeros((2, 7), np.float32))
    with pytest.raises(ValueError, match="weight"):
        cn.layer_norm(x, np.ones(7, np.float32), None, 1e-5)
    with pytest.raises(ValueError, match="span"):
        cn.layer_norm(x, None, None, 1e-5, rows=(0, 3))
