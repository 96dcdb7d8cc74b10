"""Each wrapper of serve.backend.cuda_kernels against a float64 numpy reference, for every storage dtype.

Inputs are rounded to the storage dtype first and the reference is computed in float64 from those rounded values,
so the tolerance measures the kernel alone: float32 within ~1e-5 relative, float16 / bfloat16 within 1e-2.
Outputs land on memory poisoned with NaN bytes where the pool allows it, so an element a kernel forgets to write
shows up as NaN. Runs only where CuPy sees a GPU (tests/gpu/ is skipped otherwise).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from serve.backend import cpu_conv, cpu_pool  # noqa: E402
from serve.backend import cuda_kernels as ck  # noqa: E402

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16]
IDS = ["f32", "f16", "bf16"]
_erf = np.frompyfunc(math.erf, 1, 1)


# ---- helpers ---------------------------------------------------------------------------------------------
def rounded(a: np.ndarray, dt) -> np.ndarray:
    """a rounded to dt, back in float64 (what the kernel actually sees)."""
    return np.asarray(a).astype(dt).astype(np.float64)


def dev(a: np.ndarray, dt=None):
    return cupy.asarray(np.asarray(a).astype(dt) if dt is not None else np.asarray(a))


def host(a) -> np.ndarray:
    return cupy.asnumpy(a).astype(np.float64)


def poison(*nbytes: int) -> None:
    """Fill pool blocks of these sizes with NaN bytes and free them, so the next arrays of those sizes get them."""
    blocks = [cupy.full(n, 255, dtype=np.uint8) for n in nbytes if n]
    del blocks


def check(got, ref: np.ndarray, dt, rtol: float | None = None, atol: float | None = None) -> None:
    assert got.dtype == np.dtype(dt)
    assert got.flags.c_contiguous
    if dt == np.float32:
        rtol, atol = rtol or 1e-5, atol if atol is not None else 1e-6
    else:
        rtol, atol = 1e-2, atol if atol is not None and atol > 1e-2 else 1e-2
    np.testing.assert_allclose(host(got), ref, rtol=rtol, atol=atol)


def act_ref(v: np.ndarray, act: str) -> np.ndarray:
    if act == "relu":
        return np.maximum(v, 0)
    if act == "gelu":
        return 0.5 * v * (1 + _erf(v / math.sqrt(2)).astype(np.float64))
    if act == "gelu_tanh":
        return 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
    if act == "silu":
        return v / (1 + np.exp(-v))
    return v


def softmax_ref(v: np.ndarray, log: bool = False) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        m = v.max(-1, keepdims=True)
        e = np.exp(v - m)
        s = e.sum(-1, keepdims=True)
        return (v - m) - np.log(s) if log else e / s


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# ---- activations -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("act", ["none", "relu", "gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 31, 1), (2, 33, 7), (5, 1000, 1), (2, 16, 49)])
@pytest.mark.parametrize("params", ["none", "shift", "scale", "both_f32", "both_dt"])
def test_bias_activation(rng, dt, act, shape, params):
    outer, c, inner = shape
    y = rng.standard_normal(shape) * 3
    scale = rng.standard_normal(c) if params in ("scale", "both_f32", "both_dt") else None
    shift = rng.standard_normal(c) if params in ("shift", "both_f32", "both_dt") else None
    pdt = dt if params == "both_dt" else np.float32
    ref = rounded(y, dt)
    if scale is not None:
        ref = ref * rounded(scale, pdt)[:, None]
    if shift is not None:
        ref = ref + rounded(shift, pdt)[:, None]
    ref = act_ref(ref, act).reshape(outer, c * inner)
    args = [None if p is None else dev(p, pdt) for p in (scale, shift)]
    x = dev(y.reshape(outer, c * inner), dt)
    poison(x.nbytes)
    check(ck.bias_activation(x, *args, act, inner), ref, dt, atol=2e-6)
    got = ck.bias_activation(x, *args, act, inner, out=x)  # in place
    assert got is x
    check(x, ref, dt, atol=2e-6)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_bias_activation_out_poisoned(rng, dt):
    y = rng.standard_normal((4, 33, 5))
    shift = rng.standard_normal(33)
    out = dev(np.full((4, 33, 5), np.nan), dt)
    got = ck.bias_activation(dev(y, dt), None, dev(shift, np.float32), "relu", 5, out=out)
    assert got is out
    check(out, np.maximum(rounded(y, dt) + rounded(shift, np.float32)[:, None], 0), dt)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("act", ["relu", "gelu", "gelu_tanh", "silu"])
def test_activation_any_shape_and_nan(rng, dt, act):
    v = rng.standard_normal((2, 3, 5, 7)) * 4
    v[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    with np.errstate(invalid="ignore", over="ignore"):
        ref = act_ref(rounded(v, dt), act)
    x = dev(v, dt)
    poison(x.nbytes)
    check(ck.activation(x, act), ref, dt, atol=2e-6)


def test_activation_errors():
    with pytest.raises(ValueError, match="activation"):
        ck.activation(dev(np.ones(3), np.float32), "tanh")
    with pytest.raises(ValueError, match="int32"):
        ck.activation(dev(np.ones(3, np.int32)), "relu")
    with pytest.raises(ValueError, match="shape"):
        ck.bias_activation(dev(np.ones((2, 5)), np.float32), None, dev(np.ones(3), np.float32), "none", 1)
    x = dev(np.ones((2, 3)), np.float32)
    with pytest.raises(ValueError, match="out"):
        ck.bias_activation(x, None, None, "relu", 1, out=dev(np.ones((3, 2)), np.float32))


# ---- softmax ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("cols", [1, 31, 33, 1000, 1024, 1025, 4096, 4097])
@pytest.mark.parametrize("rows", [1, 7, 257])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax(rng, dt, cols, rows, log):
    v = rng.standard_normal((rows, cols)) * 5 + 30  # a large offset: the max subtraction must happen
    ref = softmax_ref(rounded(v, dt), log)
    x = dev(v, dt)
    poison(x.nbytes)
    check(ck.softmax(x, log=log), ref, dt, atol=1e-4 if log else 1e-7)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("cols", [40, 1000, 3000])
def test_softmax_misaligned_and_strided(rng, dt, cols):
    v = rng.standard_normal(3 * cols + 1)
    x = dev(v, dt)[1:].reshape(3, cols)  # contiguous, but 1 element off the 16-byte alignment
    check(ck.softmax(x), softmax_ref(rounded(v[1:], dt).reshape(3, cols)), dt, atol=1e-7)
    t = dev(v[: 3 * cols].reshape(cols, 3), dt).T  # not contiguous
    check(ck.softmax(t), softmax_ref(rounded(v[: 3 * cols], dt).reshape(cols, 3).T), dt, atol=1e-7)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("cols", [5, 2000])
def test_softmax_special_rows(dt, cols):
    v = np.zeros((5, cols))
    v[0] = -np.inf  # all -inf: NaN, as PyTorch
    v[1, 1:] = -np.inf  # one finite: 1 there, 0 elsewhere
    v[2, cols // 2] = np.nan  # a NaN: the row is NaN
    v[3, :] = np.arange(cols) * 100.0  # huge spread
    v[4, 0] = np.inf  # +inf: NaN
    if dt == np.float16:
        v[3] = np.minimum(v[3], 6e4)  # keep float16 finite
    for log in (False, True):
        ref = softmax_ref(rounded(v, dt), log)
        got = host(ck.softmax(dev(v, dt), log=log))
        assert np.isnan(got[0]).all() and np.isnan(got[2]).all() and np.isnan(got[4]).all()
        np.testing.assert_allclose(got[[1, 3]], ref[[1, 3]], rtol=1e-2, atol=1e-6)


def test_softmax_shapes():
    y = ck.softmax(dev(np.array(3.0), np.float32))
    assert y.shape == () and host(y) == 1.0
    assert ck.softmax(dev(np.zeros((0, 4)), np.float32)).shape == (0, 4)
    y = ck.softmax(dev(np.zeros((2, 3, 5)), np.float16))
    assert y.shape == (2, 3, 5) and y.dtype == np.float16


# ---- attention softmax -----------------------------------------------------------------------------------
def masked_ref(s, scale, mask, causal, safe):
    v = s * scale
    if mask is not None and mask.dtype == np.bool_:
        v = np.where(mask, v, -np.inf)
    elif mask is not None:
        v = v + mask
    if causal:
        lq, lk = s.shape[-2:]
        v = np.where(np.arange(lk)[None, :] > np.arange(lq)[:, None], -np.inf, v)
    out = softmax_ref(v)
    if safe:
        out = np.where(np.isneginf(v).all(-1, keepdims=True), 0.0, out)
    return out


MASKS = {
    "none": lambda rng, b, h, lq, lk: None,
    "add_key": lambda rng, b, h, lq, lk: np.where(rng.random((b, 1, 1, lk)) < 0.3, -np.inf, 0.0),
    "add_full": lambda rng, b, h, lq, lk: rng.standard_normal((b, h, lq, lk)),
    "add_2d": lambda rng, b, h, lq, lk: rng.standard_normal((lq, lk)),
    "bool_key": lambda rng, b, h, lq, lk: rng.random((b, 1, 1, lk)) < 0.7,
    "bool_q": lambda rng, b, h, lq, lk: rng.random((b, 1, lq, lk)) < 0.7,
    "bool_1d": lambda rng, b, h, lq, lk: rng.random(lk) < 0.7,
}


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 2, 33, 1000), (1, 1, 3, 1100)])
@pytest.mark.parametrize("mask_kind", list(MASKS))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_scaled_masked_softmax(rng, dt, shape, mask_kind, causal):
    s = rng.standard_normal(shape) * 4
    mask = MASKS[mask_kind](rng, *shape)
    mdt = np.float32 if mask_kind == "add_full" else dt  # float masks of float32 and of the scores' dtype
    if mask is not None and mask.dtype != np.bool_:
        mask = rounded(mask, mdt)
    ref = masked_ref(rounded(s, dt), 0.125, mask, causal, safe=True)
    x = dev(s, dt)
    m = None if mask is None else dev(mask, None if mask.dtype == np.bool_ else mdt)
    poison(x.nbytes)
    check(ck.scaled_masked_softmax(x, 0.125, m, causal=causal, safe=True), ref, dt, atol=1e-7)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("lk", [6, 1500])
def test_scaled_masked_softmax_all_masked_rows(dt, lk):
    s = np.ones((1, 2, 3, lk))
    keep = np.ones((1, 2, 3, lk), bool)
    keep[0, 1, 2] = False  # one row with every key masked
    safe = host(ck.scaled_masked_softmax(dev(s, dt), 1.0, dev(keep), safe=True))
    unsafe = host(ck.scaled_masked_softmax(dev(s, dt), 1.0, dev(keep), safe=False))
    assert (safe[0, 1, 2] == 0).all() and np.isnan(unsafe[0, 1, 2]).all()
    np.testing.assert_allclose(safe[0, 0], 1 / lk, rtol=1e-2)
    np.testing.assert_allclose(unsafe[0, 0], 1 / lk, rtol=1e-2)
    additive = np.where(keep, 0.0, -np.inf)
    got = host(ck.scaled_masked_softmax(dev(s, dt), 1.0, dev(additive, np.float32), safe=True))
    assert (got[0, 1, 2] == 0).all()


def test_scaled_masked_softmax_errors():
    with pytest.raises(ValueError, match="B, H, Lq, Lk"):
        ck.scaled_masked_softmax(dev(np.zeros((2, 3, 4)), np.float32), 1.0)
    with pytest.raises(ValueError, match="broadcast"):
        ck.scaled_masked_softmax(dev(np.zeros((1, 1, 2, 4)), np.float32), 1.0, dev(np.zeros((3, 4)), np.float32))
    with pytest.raises(ValueError, match="bool nor floating"):
        ck.scaled_masked_softmax(dev(np.zeros((1, 1, 2, 4)), np.float32), 1.0, dev(np.zeros(4, np.int32)))


# ---- normalization ---------------------------------------------------------------------------------------
def ln_ref(v, n, w=None, b=None, eps=1e-5):
    r = v.reshape(-1, n)
    out = (r - r.mean(-1, keepdims=True)) / np.sqrt(r.var(-1, keepdims=True) + eps)
    if w is not None:
        out = out * w
    if b is not None:
        out = out + b
    return out.reshape(v.shape)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("n", [1, 31, 33, 384, 1000, 1024, 4096, 4097])
@pytest.mark.parametrize("rows", [1, 7, 257])
@pytest.mark.parametrize("affine", ["none", "dt", "f32", "weight_only"])
def test_layer_norm(rng, dt, n, rows, affine):
    v = rng.standard_normal((rows, n)) * 2 + 0.5
    w = rng.standard_normal(n) if affine != "none" else None
    b = rng.standard_normal(n) if affine in ("dt", "f32") else None
    pdt = np.float32 if affine == "f32" else dt
    ref = ln_ref(rounded(v, dt), n, None if w is None else rounded(w, pdt), None if b is None else rounded(b, pdt))
    x = dev(v, dt)
    poison(x.nbytes)
    got = ck.layer_norm(x, None if w is None else dev(w, pdt), None if b is None else dev(b, pdt), n, 1e-5)
    check(got, ref, dt, atol=1e-5)


@pytest.mark.parametrize("n", [1000, 4097])
@pytest.mark.parametrize("misaligned", [False, True])
def test_layer_norm_large_mean_float32(rng, n, misaligned):
    """PyTorch parity on rows with mean 1e3 and std 1: the statistics must not cancel catastrophically."""
    flat = (rng.standard_normal(7 * n + 1) + 1e3).astype(np.float32)
    v = flat[1:] if misaligned else flat[:-1]
    x = (dev(flat)[1:] if misaligned else dev(flat)[:-1]).reshape(7, n)  # misaligned: the scalar path
    r = v.astype(np.float64).reshape(7, n)
    check(ck.layer_norm(x, None, None, n, 1e-5), ln_ref(r, n), np.float32, rtol=1e-5, atol=1e-5)
    mean, var = ck.row_moments(x, n)
    np.testing.assert_allclose(host(mean), r.mean(-1), rtol=1e-7)
    np.testing.assert_allclose(host(var), r.var(-1), rtol=1e-5)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("n", [1, 49, 3136, 5000])
def test_standardize_rows_and_moments(rng, dt, n):
    v = rng.standard_normal((2, 5, n)) * 3 - 2
    r = rounded(v, dt)
    x = dev(v, dt)
    poison(x.nbytes)
    check(ck.standardize_rows(x, n, 1e-5), ln_ref(r, n), dt, atol=1e-5)
    poison(2 * 5 * 4, 2 * 5 * 4)
    mean, var = ck.row_moments(x, n)
    assert mean.dtype == np.float32 and var.dtype == np.float32 and mean.shape == (10,)
    np.testing.assert_allclose(host(mean), r.reshape(10, n).mean(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(host(var), r.reshape(10, n).var(-1), rtol=1e-4, atol=1e-6)


def test_norm_errors():
    with pytest.raises(ValueError, match="rows of 4"):
        ck.layer_norm(dev(np.zeros((3, 5)), np.float32), None, None, 4, 1e-5)
    with pytest.raises(ValueError, match="weight"):
        ck.layer_norm(dev(np.zeros((3, 4)), np.float32), dev(np.ones(3), np.float32), None, 4, 1e-5)
    with pytest.raises(ValueError, match="float64"):
        ck.row_moments(dev(np.zeros((3, 4))), 4)


# ---- embedding -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("d", [1, 31, 32, 384, 1000])
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("id_shape", [(), (3,), (2, 5)])
def test_embedding(rng, dt, d, id_dtype, id_shape):
    w = rng.standard_normal((50, d))
    ids = rng.integers(0, 50, id_shape).astype(id_dtype)
    poison(int(np.prod(id_shape)) * d * np.dtype(dt).itemsize)
    got = ck.embedding(dev(w, dt), dev(ids))
    assert got.shape == id_shape + (d,)
    np.testing.assert_array_equal(host(got), rounded(w, dt)[ids])


def test_embedding_out_of_range():
    w = dev(np.ones((10, 4)), np.float32)
    for bad in (-1, 10, 1 << 40):
        with pytest.raises(IndexError, match=str(bad)):
            ck.embedding(w, dev(np.array([0, bad, 3], np.int64)))
    with pytest.raises(ValueError, match="int32 or int64"):
        ck.embedding(w, dev(np.array([0, 1], np.int16)))
    assert ck.embedding(w, dev(np.zeros((0, 3), np.int64))).shape == (0, 3, 4)


# ---- pooling and im2col ----------------------------------------------------------------------------------
def pool_out(n, k, s, p, d=1, ceil=False):
    """PyTorch's pooling output size (ceil_mode: the last window must start inside the input or left padding)."""
    num = n + 2 * p - d * (k - 1) - 1
    o = (-(-num // s) if ceil else num // s) + 1
    if ceil and (o - 1) * s >= n + p:
        o -= 1
    return o


# (H, W, kernel, stride, padding, dilation, ceil_mode)
POOLS = [
    (7, 7, (3, 3), (2, 2), (1, 1), (1, 1), False),
    (8, 9, (2, 2), (2, 2), (0, 0), (1, 1), True),
    (6, 11, (3, 2), (1, 3), (1, 0), (2, 1), False),
    (5, 5, (2, 2), (2, 2), (1, 1), (1, 1), True),
    (1, 33, (1, 3), (1, 2), (0, 1), (1, 1), True),
    (112, 112, (3, 3), (2, 2), (1, 1), (1, 1), False),
]


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("cfg", POOLS)
@pytest.mark.parametrize("ties", [False, True], ids=["random", "ties"])
def test_max_pool2d(rng, dt, cfg, ties):
    h, w, k, s, p, d, ceil = cfg
    n, c = (2, 3) if h < 100 else (1, 2)
    v = rng.integers(-3, 3, (n, c, h, w)).astype(np.float64) if ties else rng.standard_normal((n, c, h, w))
    if not ties:
        v[0, 0, 0, 0] = np.nan
        v[-1, -1, -1, -1] = np.nan
    out = (pool_out(h, k[0], s[0], p[0], d[0], ceil), pool_out(w, k[1], s[1], p[1], d[1], ceil))
    ref, ref_idx = cpu_pool.max_pool2d(rounded(v, dt), k, s, p, d, out, True)
    poison(n * c * out[0] * out[1] * np.dtype(dt).itemsize, n * c * out[0] * out[1] * 8)
    y, idx = ck.max_pool2d(dev(v, dt), k, s, p, d, out, True)
    np.testing.assert_array_equal(host(y), ref)
    np.testing.assert_array_equal(cupy.asnumpy(idx), ref_idx)
    y2, none = ck.max_pool2d(dev(v, dt), k, s, (p[0], p[0], p[1], p[1]), d, out, False)
    assert none is None
    np.testing.assert_array_equal(host(y2), ref)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("cfg", [c for c in POOLS if c[5] == (1, 1)])
@pytest.mark.parametrize("include_pad", [True, False])
@pytest.mark.parametrize("divisor", [None, 3])
def test_avg_pool2d(rng, dt, cfg, include_pad, divisor):
    h, w, k, s, p, _, ceil = cfg
    v = rng.standard_normal((2, 3, h, w))
    out = (pool_out(h, k[0], s[0], p[0], 1, ceil), pool_out(w, k[1], s[1], p[1], 1, ceil))
    ref = cpu_pool.avg_pool2d(rounded(v, dt), k, s, p, out, include_pad, divisor)
    poison(2 * 3 * out[0] * out[1] * np.dtype(dt).itemsize)
    check(ck.avg_pool2d(dev(v, dt), k, s, p, out, include_pad, divisor), ref, dt)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("size,out", [((7, 7), (3, 3)), ((5, 9), (2, 4)), ((4, 4), (4, 4)), ((3, 3), (5, 5)),
                                      ((7, 7), (1, 1)), ((10, 1), (3, 1))])  # fmt: skip
def test_adaptive_avg_pool2d(rng, dt, size, out):
    v = rng.standard_normal((2, 3) + size)
    r = rounded(v, dt)
    ref = np.empty((2, 3) + out)
    for i in range(out[0]):
        h0, h1 = i * size[0] // out[0], -(-(i + 1) * size[0] // out[0])
        for j in range(out[1]):
            w0, w1 = j * size[1] // out[1], -(-(j + 1) * size[1] // out[1])
            ref[:, :, i, j] = r[:, :, h0:h1, w0:w1].mean((-2, -1))
    poison(2 * 3 * out[0] * out[1] * np.dtype(dt).itemsize)
    check(ck.adaptive_avg_pool2d(dev(v, dt), out), ref, dt)


# (C, H, W, kernel, stride, padding (t, b, l, r), dilation)
CONVS = [
    (3, 7, 7, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    (4, 9, 8, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    (2, 10, 11, (3, 2), (2, 1), (2, 0, 1, 1), (2, 3)),
    (3, 16, 16, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),
    (5, 6, 6, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    (1, 1, 31, (1, 5), (1, 1), (0, 0, 2, 2), (1, 1)),
]


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("cfg", CONVS)
def test_im2col(rng, dt, cfg):
    c, h, w, k, s, pads, d = cfg
    v = rng.standard_normal((2, c, h, w))
    ref = cpu_conv.unfold(rounded(v, dt), k, s, pads, d)
    t, b, l, r = pads
    out = ((h + t + b - d[0] * (k[0] - 1) - 1) // s[0] + 1, (w + l + r - d[1] * (k[1] - 1) - 1) // s[1] + 1)
    poison(ref.size * np.dtype(dt).itemsize)
    cols = ck.im2col(dev(v, dt), k, s, pads, d, out)
    assert cols.shape == ref.shape
    np.testing.assert_array_equal(host(cols), ref)
    # the convolution it serves: weight (O, C*kh*kw) @ cols
    weight = rng.standard_normal((4, c * k[0] * k[1]))
    conv = cpu_conv.conv2d(rounded(v, dt), weight.reshape(4, c, *k), None, s, pads, d, 1)
    np.testing.assert_allclose((weight @ ref).reshape(conv.shape), conv, rtol=1e-9, atol=1e-9)


def test_pool_errors():
    x = dev(np.zeros((2, 3, 4)), np.float32)
    with pytest.raises(ValueError, match="N, C, H, W"):
        ck.max_pool2d(x, (2, 2), (2, 2), (0, 0), (1, 1), (1, 1), False)
    x4 = dev(np.zeros((1, 1, 4, 4)), np.float32)
    with pytest.raises(ValueError, match="stride"):
        ck.avg_pool2d(x4, (2, 2), (0, 2), (0, 0), (2, 2), True, None)
    with pytest.raises(ValueError, match="padding"):
        ck.im2col(x4, (2, 2), (1, 1), (0, 0, 0), (1, 1), (3, 3))
    with pytest.raises(ValueError, match="int64"):
        ck.adaptive_avg_pool2d(dev(np.zeros((1, 1, 4, 4), np.int64)), (2, 2))
