"""The fused CPU attention (serve.backend.cpu_attention) against numpy's softmax(q k^T * scale + mask) v, per build,
and through scaled_dot_product_attention against PyTorch: shapes off the tile sizes, strided q, bool / float /
broadcast masks, rows with every key masked (zeros when safe, NaN otherwise), and the cases it leaves to the
unfused path."""

import numpy as np
import pytest

import serve
import serve.nn.functional as F
from serve.backend import cpu_attention
from tests.helpers import needs_torch, torch

SHAPES = [(2, 3, 17, 29, 33, 20), (1, 12, 128, 128, 32, 32), (3, 2, 5, 40, 64, 80), (2, 4, 50, 7, 16, 48)]
MASKS = ["none", "bool", "float", "padding", "dead"]


def _inputs(shape, mask_kind, seed=0):
    b, h, l, s, e, ev = shape
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, l, h, e), dtype=np.float32).transpose(0, 2, 1, 3)  # (B, H, L, E), strided
    k = rng.standard_normal((b, h, s, e), dtype=np.float32)
    v = rng.standard_normal((b, h, s, ev), dtype=np.float32)
    mask = {
        "none": None,
        "bool": rng.random((b, h, l, s)) > 0.3,
        "float": rng.standard_normal((l, s)).astype(np.float32),
        "padding": np.where(rng.random((b, 1, 1, s)) > 0.2, 0.0, -np.inf).astype(np.float32),
        "dead": rng.random((b, 1, l, s)) > 0.5,
    }[mask_kind]
    if mask_kind == "dead":
        mask[:, :, 0, :] = False  # query row 0 sees no key
    return q, k, v, mask


def _reference(q, k, v, mask, scale, safe):
    scores = (q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2)) * scale
    if mask is not None:
        scores = scores + (np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask)
    peak = scores.max(-1, keepdims=True)
    dead = np.isneginf(peak)
    e = np.exp(scores - np.where(dead, 0.0, peak))
    with np.errstate(invalid="ignore"):  # the dead rows: replaced below
        probs = e / e.sum(-1, keepdims=True)
    out = probs @ v
    return np.where(dead, 0.0 if safe else np.nan, out)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("safe", [True, False])
def test_matches_numpy(build, shape, mask_kind, safe):
    q, k, v, mask = _inputs(shape, mask_kind)
    scale = 0.7
    got = cpu_attention.attention(q, k, v, mask, mask is not None and mask.dtype == bool, safe, scale)
    ref = _reference(q, k, v, mask, scale, safe)
    assert got is not None and got.shape == ref.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(ref), rtol=1e-5, atol=1e-5)


def test_three_and_two_dims(build):
    q, k, v, _ = _inputs((1, 3, 9, 21, 8, 8), "none")
    for qq, kk, vv in ((q[0], k[0], v[0]), (q[0, 0], k[0, 0], v[0, 0])):
        got = cpu_attention.attention(qq, kk, vv, None, False, True, 0.5)
        np.testing.assert_allclose(got, _reference(qq, kk, vv, None, 0.5, True), rtol=1e-5, atol=1e-5)


def test_declines_what_it_does_not_run(build):
    q, k, v, _ = _inputs((1, 2, 9, 12, 8, 8), "none")
    assert cpu_attention.attention(q[:, :, :2], k, v, None, False, True, 1.0) is None  # a decoder's few queries
    assert cpu_attention.attention(q.astype(np.float64), k, v, None, False, True, 1.0) is None
    assert cpu_attention.attention(q, k[:1, :1], v, None, False, True, 1.0) is None  # batch dims broadcast
    assert cpu_attention.attention(q[..., ::2], k[..., ::2], v, None, False, True, 1.0) is None  # strided rows


@needs_torch
@pytest.mark.parametrize("mask_kind", MASKS)
def test_sdpa_matches_torch(build, mask_kind):
    q, k, v, mask = _inputs((2, 4, 33, 45, 24, 24), mask_kind, seed=1)
    with serve.no_grad():
        args = [serve.from_numpy(a) for a in (q, np.ascontiguousarray(k), v)]
        got = F.scaled_dot_product_attention(*args, attn_mask=None if mask is None else serve.from_numpy(mask))
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(np.ascontiguousarray(a)) for a in (q, k, v)),
        attn_mask=None if mask is None else torch.from_numpy(mask),
    )
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


def test_recording_autograd_takes_the_unfused_path():
    q, k, v, _ = _inputs((1, 2, 9, 12, 8, 8), "none")
    qt = serve.from_numpy(np.ascontiguousarray(q)).requires_grad_()
    out = F.scaled_dot_product_attention(qt, serve.from_numpy(k), serve.from_numpy(v))
    out.sum().backward()
    assert qt.grad is not None and qt.grad.shape == qt.shape
