"""The bf16 fused attention (cpu_attention.attention(..., dtype="bfloat16"), serve_kernels.c's sk_attention_bf16 on
vdpbf16ps) against a float64 numpy reference with the kernel's roundings: q, k and v rounded to bf16, the scaled and
masked scores softmaxed, the probabilities rounded to bf16 before the product with v. Additive, bool, broadcast
padding and causal masks, fully masked rows (zeros when safe, NaN otherwise), tails in L, S and E (odd, off the
12-row block and the 32-column panel), E = 32 / 64 / 128, strided q and a strided out view, and spans of (batch,
head) pairs as lanes call them. Skipped where the CPU lacks avx512_bf16."""

import numpy as np
import pytest

from serve.backend import cpu_attention, cpu_native

from .test_cpu_attention import _inputs

pytestmark = pytest.mark.skipif(not cpu_native.bf16_available(), reason="no AVX512-BF16 kernel build for this CPU")

# (B, H, L, S, E, Ev): tails in every dim, then the common head sizes
SHAPES = [(2, 3, 17, 29, 33, 20), (1, 2, 13, 45, 31, 33), (1, 4, 128, 128, 64, 64), (2, 2, 40, 64, 32, 32),
          (1, 2, 24, 50, 128, 128), (3, 1, 5, 1, 7, 9)]  # fmt: skip
MASKS = ["none", "bool", "float", "padding", "dead", "causal"]


def _bf(a):
    return cpu_native.round_bf16(np.ascontiguousarray(a, np.float32)).astype(np.float64)


def _reference(q, k, v, mask, scale, safe, rounded=True):
    """softmax(q k^T * scale + mask) v in float64 from the bf16-rounded q, k, v, the probabilities rounded to bf16
    (rounded=False: the float32 operands, no rounding: what the bf16 kernel is compared against loosely)."""
    r = _bf if rounded else (lambda a: a.astype(np.float64))
    scores = (r(q) @ r(k).swapaxes(-1, -2)) * scale  # (B, H, L, E) @ (B, H, E, S) -> (B, H, L, S)
    if mask is not None:
        scores = scores + (np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask)
    peak = scores.max(-1, keepdims=True)
    dead = np.isneginf(peak)
    e = np.exp(scores - np.where(dead, 0.0, peak))
    with np.errstate(invalid="ignore"):
        probs = e / e.sum(-1, keepdims=True)
    probs = r(probs.astype(np.float32)) if rounded else probs
    out = probs @ r(v)  # (B, H, L, S) @ (B, H, S, Ev)
    return np.where(dead, 0.0 if safe else np.nan, out)


def _mask(kind, shape, seed):
    _, _, l, s, _, _ = shape
    if kind == "causal":
        return np.tril(np.ones((l, s), bool))  # is_causal's mask: top-left aligned
    _, _, _, mask = _inputs(shape, kind, seed)
    return mask


def _run(q, k, v, mask, safe, scale, **kw):
    is_bool = mask is not None and mask.dtype == bool
    return cpu_attention.attention(q, k, v, mask, is_bool, safe, scale, dtype="bfloat16", **kw)


def assert_close(got, ref):
    """Equal to float32 accumulation's error (1e-5) except where the kernel's float32 p and the reference's float64 p
    round to neighbouring bf16 values (a probability within ~1e-7 of a rounding boundary: about one in 10^4): such
    a flip moves its row's outputs by up to one bf16 ulp of p times |v| (4e-3 at most), so at most one row in 10
    may be off by that much, and no more."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    got, ref = np.nan_to_num(got.astype(np.float64)), np.nan_to_num(ref)
    scale = max(1.0, float(np.abs(ref).max()))
    err = np.abs(got - ref)
    assert err.max() <= 4e-3 * scale, f"max error {err.max():.3g}"
    rows_off = (err.max(-1) > 1e-5 * scale).mean()
    assert rows_off <= 0.1, f"{rows_off:.1%} of the rows differ by more than 1e-5 (max {err.max():.3g})"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("safe", [True, False])
def test_matches_numpy_with_the_same_roundings(shape, mask_kind, safe):
    q, k, v, _ = _inputs(shape, "none", seed=1)
    mask = _mask(mask_kind, shape, 1)
    got = _run(q, k, v, mask, safe, 0.3)
    if shape[2] < cpu_attention.MIN_QUERIES:
        assert got is None  # a decoder's few rows: the unfused path, as in float32
        return
    assert got is not None
    assert_close(got, _reference(q, k, v, mask, 0.3, safe))


def test_the_products_are_bf16_not_float32():
    """The bf16 kernel agrees with the rounded reference far better than with the float32 one, and the float32
    kernel the other way round: the roundings are where the docstring says."""
    shape = (1, 2, 64, 96, 64, 64)
    q, k, v, _ = _inputs(shape, "none", seed=2)
    bf16 = _run(q, k, v, None, True, 0.125)
    fp32 = cpu_attention.attention(q, k, v, None, False, True, 0.125)
    rounded, exact = _reference(q, k, v, None, 0.125, True), _reference(q, k, v, None, 0.125, True, rounded=False)
    assert bf16 is not None and fp32 is not None
    err_bf16 = np.abs(bf16 - rounded).max()
    assert err_bf16 * 20 < np.abs(bf16 - exact).max()
    assert np.abs(fp32 - exact).max() * 20 < np.abs(fp32 - rounded).max()
    assert np.abs(bf16 - exact).max() < 1e-2  # still the attention, to bf16's precision


def test_spans_and_a_strided_out_view_write_exactly_the_whole():
    shape = (2, 3, 30, 41, 64, 64)
    q, k, v, mask = _inputs(shape, "float", seed=3)
    whole = _run(q, k, v, mask, True, 0.125)
    assert whole is not None
    b, h, l, _, _, ev = shape
    merged = np.full((b, l, h * ev), np.nan, np.float32)
    view = merged.reshape(b, l, h, ev).transpose(0, 2, 1, 3)  # (B, H, L, Ev) with the (B, L, H * Ev) strides
    assert _run(q, k, v, mask, True, 0.125, out=view) is view
    np.testing.assert_array_equal(view, whole)
    fn = cpu_native.attention_bf16_kernel()
    st = np.array([x // 4 for a in (q, k, v, whole) for x in a.strides[:3]] + [0, 0, 0, 0], np.int64)
    pieces = np.full_like(whole, np.nan)
    for i0, i1 in [(0, 1), (1, 4), (4, 6)]:  # the lanes' spans of (batch, head) pairs
        assert fn(q.ctypes.data, k.ctypes.data, v.ctypes.data, pieces.ctypes.data, None, st.ctypes.data, h, l,
                  shape[3], shape[4], ev, 0.125, 1, i0, i1) == 0  # fmt: skip
    assert_close(pieces, _reference(q, k, v, None, 0.125, True))


def test_unknown_dtype_is_refused():
    q, k, v, _ = _inputs((1, 1, 8, 8, 8, 8), "none")
    with pytest.raises(ValueError, match="dtype must be"):
        cpu_attention.attention(q, k, v, None, False, True, 1.0, dtype="float16")
