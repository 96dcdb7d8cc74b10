"""serve.backend.cpu_decode: the decoder's native RMSNorm (residual add before it, both results kept), act(gate) * up
and RoPE in place, on each build, against float64 numpy references of transformers' arithmetic; and the None /
False answers where a kernel does not apply."""

import numpy as np
import pytest

from serve.backend import cpu_decode, cpu_native

from .conftest import BUILDS

pytestmark = pytest.mark.skipif(not BUILDS, reason="no native kernel build for this CPU")
WIDTHS = [1, 7, 16, 37, 768]  # under one vector, a tail on either build, whole vectors


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _rms_ref(s, w, eps):
    s = s.astype(np.float64)
    return s / np.sqrt(np.mean(s * s, axis=-1, keepdims=True) + eps) * w


@pytest.mark.parametrize("n", WIDTHS)
def test_rms_norm_matches_float64(build, n):
    rng = np.random.default_rng(n)
    x, w = _rand(rng, 5, n) * 3, _rand(rng, n)
    out = cpu_decode.rms_norm(x, w, 1e-6)
    assert out is not None and out.shape == (5, n)
    np.testing.assert_allclose(out, _rms_ref(x, w, 1e-6), rtol=2e-6, atol=2e-6)
    unscaled = cpu_decode.rms_norm(x, None, 1e-6)
    np.testing.assert_allclose(unscaled, _rms_ref(x, 1.0, 1e-6), rtol=2e-6, atol=2e-6)


def test_rms_norm_adds_the_residual_first_and_keeps_the_sum(build):
    rng = np.random.default_rng(1)
    wide = _rand(rng, 6, 100)
    x, res, w = wide[:, 10:47], _rand(rng, 6, 37), _rand(rng, 37)  # x a column slice of a wider array
    total = np.empty((6, 37), np.float32)
    out = cpu_decode.rms_norm(x, w, 1e-5, residual=res, sum_out=total)
    np.testing.assert_array_equal(total, x + res)
    np.testing.assert_allclose(out, _rms_ref(x + res, w, 1e-5), rtol=2e-6, atol=2e-6)
    inplace = res.copy()  # out may be the residual itself, without sum_out
    got = cpu_decode.rms_norm(x, w, 1e-5, residual=inplace, out=inplace)
    assert got is inplace
    np.testing.assert_allclose(inplace, _rms_ref(x + res, w, 1e-5), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("half", [3, 16, 45, 2816])
def test_glu_matches_float64(build, act, half):
    rng = np.random.default_rng(half)
    gu = _rand(rng, 4, 2 * half) * 4
    gu[0, :2] = [-200.0, 200.0]  # exp overflows in a naive silu: -0 and the value itself
    out = cpu_decode.glu(gu, act)
    g, u = gu[:, :half].astype(np.float64), gu[:, half:].astype(np.float64)
    if act == "silu":
        ref = g / (1 + np.exp(-g)) * u
    else:
        ref = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g**3))) * u
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_glu_refuses_an_unknown_activation():
    with pytest.raises(ValueError, match="not supported"):
        cpu_decode.glu(np.zeros((1, 4), np.float32), "relu")


@pytest.mark.parametrize(("head_dim", "rot"), [(64, 64), (8, 8), (34, 34), (128, 64), (16, 0)])
def test_rope_in_place_matches_rotate_half(build, head_dim, rot):
    rng = np.random.default_rng(head_dim + rot)
    t, heads, kv_heads = 5, 4, 2
    qkv = _rand(rng, t, (heads + 2 * kv_heads) * head_dim)  # q, k, v heads side by side, as the product writes
    ref_in = qkv.copy()
    angles = rng.uniform(0, 50, (t, rot // 2)).astype(np.float32)
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]  # (T, 1, rot/2), as Rope.cos_sin gives
    assert cpu_decode.rope_(qkv, heads + kv_heads, head_dim, rot, cos, sin)
    x = ref_in.reshape(t, heads + 2 * kv_heads, head_dim).astype(np.float64)
    rotated = x[:, : heads + kv_heads]
    x1, x2 = rotated[..., : rot // 2], rotated[..., rot // 2 : rot]
    c, s = cos.astype(np.float64), sin.astype(np.float64)
    ref = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s, rotated[..., rot:]], axis=-1)
    got = qkv.reshape(t, heads + 2 * kv_heads, head_dim)
    np.testing.assert_allclose(got[:, : heads + kv_heads], ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[:, heads + kv_heads :], ref_in.reshape(got.shape)[:, heads + kv_heads :])  # v


def test_rows_split_across_lanes_equal_one_lane(build):
    rng = np.random.default_rng(3)
    x, w = _rand(rng, 512, 1024), _rand(rng, 1024)  # a prefill chunk: large enough to split
    whole = np.stack([cpu_decode.rms_norm(x[i : i + 1], w, 1e-6)[0] for i in range(0, 512, 64)])
    np.testing.assert_array_equal(cpu_decode.rms_norm(x, w, 1e-6)[::64], whole)


def test_no_rows_give_no_rows(build):
    """A step whose chunks sample nothing normalises x[[]]: (0, N), which numpy gives zero strides."""
    x = np.ones((5, 64), np.float32)[np.array([], np.int64)]
    assert cpu_decode.rms_norm(x, np.ones(64, np.float32), 1e-6).shape == (0, 64)
    assert cpu_decode.glu(np.ones((0, 8), np.float32)).shape == (0, 4)
    none = np.ones((0, 4), np.float32)
    assert cpu_decode.rope_(np.ones((0, 16), np.float32), 2, 8, 8, none, none)


def test_none_where_the_kernel_does_not_apply(monkeypatch):
    x = np.ones((2, 8), np.float32)
    assert cpu_decode.rms_norm(x.astype(np.float64), None, 1e-6) is None  # not float32
    assert cpu_decode.glu(np.ones((2, 7), np.float32)) is None  # odd width: no gate/up halves
    cos = np.ones((2, 4), np.float32)
    assert not cpu_decode.rope_(x, 1, 8, 6, cos, cos)  # cos of the wrong width
    monkeypatch.setattr(cpu_native, "library", lambda: None)
    assert cpu_decode.rms_norm(x, None, 1e-6) is None
    assert cpu_decode.glu(x) is None
    assert not cpu_decode.rope_(x, 1, 8, 8, cos, cos)
