"""The attention pass: nn.MultiheadAttention's projections as planned linear layers, the output projection's residual
add and the LayerNorm after it fused; every call the plan does not take answers as the original module."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from serve import nn
from serve.inference import kernels, optimize
from serve.inference.addnorm import Pending
from serve.inference.attention import PlannedMultiheadAttention
from tests.unit.zoo.parity import assert_rel_close, copy_weights

pytestmark = pytest.mark.skipif(kernels.native() is None, reason="the planned projections run on the native GEMM")
RNG = np.random.default_rng(1)


def _x(*shape):
    return serve.from_numpy(RNG.standard_normal(shape).astype(np.float32))


def _plan(model, *inputs, **kw):
    with serve.no_grad():
        opt = optimize(model.eval(), inputs, tune=False, **kw)
        assert opt.optimized, opt.reason
        return opt, opt(*inputs), model(*inputs)


@pytest.mark.parametrize("batch_first", [True, False])
def test_encoder_attention_is_planned_and_its_residual_norm_fused(batch_first):
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=batch_first)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    x = _x(3, 10, 32) if batch_first else _x(10, 3, 32)
    opt, got, want = _plan(model, x)
    passes = opt.describe()["passes"]
    assert passes["attention"] == 2 and passes["residual_fused"] == 4 and passes["add_norm"] == 4
    assert isinstance(opt.plan.layers[0].self_attn, PlannedMultiheadAttention)
    assert_rel_close(got, want, 1e-4)
    off, got_off, _ = _plan(model, x, passes=("fold", "fuse", "group", "pool", "addnorm"))
    assert off.describe()["passes"]["attention"] == 0
    assert_rel_close(got_off, want, 1e-4)


class _Attend(nn.Module):
    """Self-attention with masks and its residual norm, as a user writes it."""

    def __init__(self, **kw) -> None:
        super().__init__()
        self.attn, self.norm = nn.MultiheadAttention(24, 3, batch_first=True, **kw), nn.LayerNorm(24)

    def forward(self, x, mask, pad):
        return self.norm(x + self.attn(x, x, x, attn_mask=mask, key_padding_mask=pad, need_weights=False)[0])


def test_float_masks_run_planned_and_match_torch():
    torch = pytest.importorskip("torch")
    model = _Attend()
    ref = torch.nn.MultiheadAttention(24, 3, batch_first=True).eval()
    copy_weights(ref, model.attn)
    x = RNG.standard_normal((2, 7, 24)).astype(np.float32)
    mask = np.where(np.triu(np.ones((7, 7), bool), 1), -np.inf, 0.0).astype(np.float32)
    pad = np.zeros((2, 7), np.float32)
    pad[1, 5:] = -np.inf
    opt, got, want = _plan(model, serve.from_numpy(x), serve.from_numpy(mask), serve.from_numpy(pad))
    assert opt.describe()["passes"]["add_norm"] == 1
    assert_rel_close(got, want, 1e-4)
    with torch.no_grad():
        tx = torch.from_numpy(x)
        attn = ref(tx, tx, tx, attn_mask=torch.from_numpy(mask), key_padding_mask=torch.from_numpy(pad),
                   need_weights=False)[0]  # fmt: skip
        expect = torch.nn.functional.layer_norm(tx + attn, (24,))
    assert_rel_close(got, expect, 1e-4)


def test_calls_the_plan_does_not_take_answer_as_the_original():
    mha = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    q, kv = _x(2, 5, 16), _x(2, 6, 16)
    planned = PlannedMultiheadAttention(mha)
    with serve.no_grad():
        cross, cross_w = planned(q, kv, kv)  # cross-attention, weights asked for: the original's path
        want, want_w = mha(q, kv, kv)
        assert_rel_close(cross, want, 1e-6)
        assert_rel_close(cross_w, want_w, 1e-6)
        pad = serve.from_numpy(np.array([[False] * 5, [False] * 3 + [True] * 2]))
        fast, _ = planned(q, q, q, key_padding_mask=pad, need_weights=False)  # PyTorch's fast path: NaN semantics
        assert_rel_close(fast, mha(q, q, q, key_padding_mask=pad, need_weights=False)[0], 1e-6)
    x = _x(2, 5, 16)
    x.requires_grad_(True)
    out, _ = planned(x, x, x, need_weights=False)  # grad recording: the original
    out.sum().backward()
    assert x.grad is not None


def test_attention_the_plan_cannot_run_is_left_alone():
    class Cross(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(24, 3, kdim=12, vdim=12, batch_first=True)  # separate weights

        def forward(self, x, m):
            return self.attn(x, m, m, need_weights=False)[0]

    opt, got, want = _plan(Cross(), _x(2, 4, 24), _x(2, 6, 12))
    assert opt.describe()["passes"]["attention"] == 0
    assert_rel_close(got, want, 1e-5)


def test_pending_output_projection_is_made_by_any_other_reader():
    model = _Attend()
    x, mask, pad = _x(2, 7, 24), serve.zeros(7, 7), serve.zeros(2, 7)
    opt, _, _ = _plan(model, x, mask, pad)
    with serve.no_grad():
        out, _ = opt.plan.attn(x, x, x, attn_mask=mask, key_padding_mask=pad, need_weights=False)
        assert isinstance(out, Pending) and out.is_pending()
        want, _ = model.attn(x, x, x, attn_mask=mask, key_padding_mask=pad, need_weights=False)
        assert_rel_close(out * 1.0, want, 1e-4)  # read plainly: the product runs without the add


@pytest.mark.parametrize("batch_first", [True, False])
def test_unmasked_heads_are_written_into_the_output_projections_input(batch_first, monkeypatch):
    """Without a mask the fused kernel writes each head into its columns of one (N, L, E) / (L, N, E) array (no
    merge copy): the kernel is called with such an out view, and the answer is eager's."""
    from serve.backend import cpu_attention

    if cpu_attention.cpu_native.attention_kernel() is None:
        pytest.skip("no native attention kernel")
    seen = []
    real = cpu_attention.attention

    def spy(*args, **kw):
        seen.append(kw.get("out"))
        return real(*args, **kw)

    monkeypatch.setattr(cpu_attention, "attention", spy)
    model = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=batch_first), 2,
                                  enable_nested_tensor=False)  # fmt: skip
    x = _x(3, 10, 32) if batch_first else _x(10, 3, 32)
    _, got, want = _plan(model, x)
    assert_rel_close(got, want, 1e-4)
    views = [o for o in seen if o is not None]
    assert views and all(o.shape == (3, 4, 10, 8) and not o.flags.c_contiguous for o in views)
    assert all(o.base is not None and o.base.shape == ((3, 10, 32) if batch_first else (10, 3, 32)) for o in views)


def test_attention_kernel_out_view_equals_its_own_output():
    from serve.backend import cpu_attention

    if cpu_attention.cpu_native.attention_kernel() is None:
        pytest.skip("no native attention kernel")
    q, k, v = (RNG.standard_normal((2, 3, 9, 8)).astype(np.float32) for _ in range(3))
    want = cpu_attention.attention(q, k, v, None, False, True, 0.35)
    merged = np.full((2, 9, 24), np.nan, np.float32)
    heads = merged.reshape(2, 9, 3, 8).transpose(0, 2, 1, 3)  # (N, heads, L, hd) view of (N, L, E)
    got = cpu_attention.attention(q, k, v, None, False, True, 0.35, out=heads)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(merged, want.transpose(0, 2, 1, 3).reshape(2, 9, 24))
    with pytest.raises(ValueError, match="out must be float32"):
        cpu_attention.attention(q, k, v, None, False, True, 0.35, out=np.empty((2, 3, 9, 7), np.float32))
