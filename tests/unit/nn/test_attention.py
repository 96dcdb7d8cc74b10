"""F.scaled_dot_product_attention, F.multi_head_attention_forward and nn.MultiheadAttention against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import serve
import serve.nn.functional as F
from serve import nn
from tests.helpers import assert_close, check_op, needs_torch, torch

RTOL, ATOL = 1e-5, 1e-5


# ---- scaled_dot_product_attention ----------------------------------------------------------------------
def _bool_mask(shape, seed=3, dead_row=None):
    m = np.random.default_rng(seed).random(shape) > 0.4
    m[..., 0] = True  # every row attends somewhere unless a dead row is asked for
    if dead_row is not None:
        m[..., dead_row, :] = False
    return m


def _mask(lib, m):
    return lib.tensor(m)


@pytest.mark.parametrize("shapes", [[(2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6)], [(4, 8), (5, 8), (5, 8)]])
def test_sdpa_no_mask(shapes):
    check_op(shapes, lambda lib, q, k, v: lib.nn.functional.scaled_dot_product_attention(q, k, v), rtol=RTOL)


def test_sdpa_scale_and_causal():
    check_op(
        [(2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 3)],
        lambda lib, q, k, v: lib.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
        rtol=RTOL,
    )


def test_sdpa_causal_more_queries_than_keys():
    # top-left aligned: query i sees keys 0..i
    check_op(
        [(6, 4), (3, 4), (3, 2)],
        lambda lib, q, k, v: lib.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
        rtol=RTOL,
    )


@pytest.mark.parametrize("dead_row", [None, 1])
def test_sdpa_bool_mask(dead_row):
    m = _bool_mask((3, 4, 5), dead_row=dead_row)
    check_op(
        [(2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6)],
        lambda lib, q, k, v: lib.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=_mask(lib, m)),
        rtol=RTOL,
    )


@pytest.mark.parametrize("dead_row", [None, 2])
def test_sdpa_float_mask(dead_row):
    m = np.where(_bool_mask((4, 5), dead_row=dead_row), 0.0, -np.inf).astype(np.float32)
    m += np.random.default_rng(5).uniform(-1, 1, m.shape).astype(np.float32)
    check_op(
        [(2, 4, 8), (2, 5, 8), (2, 5, 6)],
        lambda lib, q, k, v: lib.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=_mask(lib, m)),
        rtol=RTOL,
    )


def test_sdpa_grouped_query_attention():
    check_op(
        [(1, 4, 3, 8), (1, 2, 5, 8), (1, 2, 5, 8)],
        lambda lib, q, k, v: lib.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        rtol=RTOL,
    )


def test_sdpa_dropout_one_gives_zeros():
    q = serve.randn(2, 3, 4)
    out = F.scaled_dot_product_attention(q, q, q, dropout_p=1.0)
    assert not out.numpy().any()


def test_sdpa_errors():
    q = serve.randn(2, 3, 4)
    with pytest.raises(RuntimeError, match="Explicit attn_mask should not be set when is_causal=True"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=serve.ones(3, 3, dtype=serve.bool), is_causal=True)
    for dt in (serve.int64, serve.float64):
        with pytest.raises(RuntimeError, match="attn_mask dtype to be bool or float"):
            F.scaled_dot_product_attention(q, q, q, attn_mask=serve.ones(3, 3, dtype=dt))
    out = F.scaled_dot_product_attention(q.double(), q.double(), q.double(), attn_mask=serve.zeros(3, 3))
    assert out.dtype == serve.float64
    with pytest.raises(RuntimeError, match="same dtype"):
        F.scaled_dot_product_attention(q.double(), q, q)
    with pytest.raises(RuntimeError, match="must divide the number of heads"):
        F.scaled_dot_product_attention(serve.randn(1, 4, 3, 8), serve.randn(1, 3, 5, 8), serve.randn(1, 3, 5, 8),
                                       enable_gqa=True)  # fmt: skip


# ---- MultiheadAttention --------------------------------------------------------------------------------
def _pair(embed_dim=8, num_heads=2, seed=0, **kw):
    torch.manual_seed(seed)
    ref = torch.nn.MultiheadAttention(embed_dim, num_heads, **kw)
    with torch.no_grad():  # non-zero biases so that a wrong bias path shows
        for name, p in ref.named_parameters():
            if "bias" in name:
                p.uniform_(-0.5, 0.5)
    ours = nn.MultiheadAttention(embed_dim, num_heads, **kw)
    ours.load_state_dict({k: serve.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    return ref, ours


def _inputs(shapes, seed=1):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    return [torch.tensor(a, requires_grad=True) for a in arrays], [serve.tensor(a, requires_grad=True) for a in arrays]


def _run(ref, ours, t_args, s_args, masks=None, grad=True, **kw):
    """Call both modules (masks as numpy arrays by keyword), compare outputs and the inputs' gradients."""
    t_masks = {k: torch.tensor(v) for k, v in (masks or {}).items()}
    s_masks = {k: serve.tensor(v) for k, v in (masks or {}).items()}
    t_out, t_w = ref(*t_args, **t_masks, **kw)
    s_out, s_w = ours(*s_args, **s_masks, **kw)
    assert_close(s_out, t_out, atol=ATOL, rtol=RTOL)
    assert (s_w is None) == (t_w is None)
    if t_w is not None:
        assert_close(s_w, t_w, atol=ATOL, rtol=RTOL)
    if not grad:
        return
    cot = np.random.default_rng(9).standard_normal(tuple(t_out.shape)).astype(np.float32)
    (t_out * torch.tensor(cot)).sum().backward()
    (s_out * serve.tensor(cot)).sum().backward()
    for t, s in zip(t_args, s_args):
        if t.grad is not None:
            assert_close(s.grad, t.grad, atol=1e-4, rtol=1e-4)


@needs_torch
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
def test_mha_self_attention(batch_first, need_weights, average):
    ref, ours = _pair(batch_first=batch_first)
    (tx,), (sx,) = _inputs([(2, 5, 8) if batch_first else (5, 2, 8)])
    _run(ref, ours, (tx, tx, tx), (sx, sx, sx), need_weights=need_weights, average_attn_weights=average)


@needs_torch
@pytest.mark.parametrize("mask_kind", ["kpm_bool", "kpm_float", "attn2d_bool", "attn3d_float", "both_bool"])
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_masks(mask_kind, need_weights):
    ref, ours = _pair(batch_first=True)
    (tx,), (sx,) = _inputs([(2, 5, 8)])
    kpm = np.zeros((2, 5), dtype=bool)
    kpm[0, 3:] = True
    attn = _bool_mask((5, 5), seed=4)
    masks = {
        "kpm_bool": {"key_padding_mask": kpm},
        "kpm_float": {"key_padding_mask": np.where(kpm, -np.inf, 0.3).astype(np.float32)},
        "attn2d_bool": {"attn_mask": ~attn},  # MHA masks are True where attention is *not* allowed
        "attn3d_float": {"attn_mask": np.random.default_rng(2).uniform(-2, 2, (4, 5, 5)).astype(np.float32)},
        "both_bool": {"attn_mask": ~attn, "key_padding_mask": kpm},
    }[mask_kind]
    _run(ref, ours, (tx, tx, tx), (sx, sx, sx), masks, need_weights=need_weights)


@needs_torch
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_fully_masked_rows_match_torch(need_weights):
    # a fully padded sequence: NaN with need_weights (plain softmax), the output bias without (safe softmax)
    ref, ours = _pair(batch_first=True)
    (tx,), (sx,) = _inputs([(2, 4, 8)])
    kpm = np.zeros((2, 4), dtype=bool)
    kpm[1] = True
    _run(ref, ours, (tx, tx, tx), (sx, sx, sx), {"key_padding_mask": kpm}, grad=False, need_weights=need_weights)


@needs_torch
@pytest.mark.parametrize("float_mask", [False, True])
def test_mha_fully_masked_rows_on_torch_fast_path(float_mask):
    # eval + no grad + batched self-attention: PyTorch's fast path gives NaN, except for float masks
    ref, ours = _pair(batch_first=True)
    ref.eval(), ours.eval()
    (tx,), (sx,) = _inputs([(2, 4, 8)])
    kpm = np.zeros((2, 4), dtype=bool)
    kpm[1] = True
    mask = np.where(kpm, -np.inf, 0).astype(np.float32) if float_mask else kpm
    with torch.no_grad(), serve.no_grad():
        _run(ref, ours, (tx, tx, tx), (sx, sx, sx), {"key_padding_mask": mask}, grad=False, need_weights=False)
        out = ours(sx, sx, sx, key_padding_mask=serve.tensor(mask), need_weights=False)[0]
        assert np.isnan(out.numpy()).any() != float_mask


@needs_torch
def test_mha_cross_attention_kdim_vdim_bias_kv_zero_attn():
    ref, ours = _pair(kdim=6, vdim=3, add_bias_kv=True, add_zero_attn=True)
    assert "q_proj_weight" in dict(ours.named_parameters()) and ours.in_proj_weight is None
    tq, tk, tv = _inputs([(4, 2, 8), (5, 2, 6), (5, 2, 3)])[0]
    sq, sk, sv = _inputs([(4, 2, 8), (5, 2, 6), (5, 2, 3)])[1]
    kpm = np.zeros((2, 5), dtype=bool)
    kpm[1, 2:] = True
    _run(ref, ours, (tq, tk, tv), (sq, sk, sv), {"key_padding_mask": kpm, "attn_mask": ~_bool_mask((4, 5))})


@needs_torch
def test_mha_key_is_value_and_no_bias():
    ref, ours = _pair(bias=False, num_heads=4)
    (tq, tm), (sq, sm) = _inputs([(3, 2, 8), (6, 2, 8)])
    _run(ref, ours, (tq, tm, tm), (sq, sm, sm), average_attn_weights=False)


@needs_torch
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_unbatched_with_3d_mask(need_weights):
    ref, ours = _pair(batch_first=True)
    (tx,), (sx,) = _inputs([(5, 8)])
    masks = {"attn_mask": np.random.default_rng(2).uniform(-2, 2, (2, 5, 5)).astype(np.float32),
             "key_padding_mask": np.array([0, 0, -np.inf, 0.5, -np.inf], dtype=np.float32)}  # fmt: skip
    _run(ref, ours, (tx, tx, tx), (sx, sx, sx), masks, need_weights=need_weights)


@needs_torch
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_is_causal(need_weights):
    ref, ours = _pair()
    (tx,), (sx,) = _inputs([(5, 2, 8)])
    causal = np.triu(np.full((5, 5), -np.inf, dtype=np.float32), 1)
    _run(ref, ours, (tx, tx, tx), (sx, sx, sx), {"attn_mask": causal}, is_causal=True, need_weights=need_weights)


@needs_torch
def test_mha_eval_no_grad_matches_torch_fast_path():
    ref, ours = _pair(batch_first=True)
    ref.eval(), ours.eval()
    (tx,), (sx,) = _inputs([(3, 6, 8)])
    kpm = np.zeros((3, 6), dtype=bool)
    kpm[0, 4:] = True
    with torch.no_grad(), serve.no_grad():
        _run(ref, ours, (tx, tx, tx), (sx, sx, sx), {"key_padding_mask": kpm}, grad=False, need_weights=False)


@needs_torch
def test_mha_parameter_gradients():
    ref, ours = _pair(batch_first=True)
    (tx,), (sx,) = _inputs([(2, 4, 8)])
    ref(tx, tx, tx)[0].square().sum().backward()
    ours(sx, sx, sx)[0].square().sum().backward()
    for name, p in ref.named_parameters():
        assert_close(dict(ours.named_parameters())[name].grad, p.grad, atol=1e-4, rtol=1e-4)


@needs_torch
def test_mha_dropout_only_in_training():
    _, ours = _pair(dropout=0.5, batch_first=True)
    x = serve.randn(2, 5, 8)
    ours.eval()
    a, b = ours(x, x, x)[0], ours(x, x, x)[0]
    assert_close(a, b, atol=0, rtol=0)
    ours.train()
    _, w = ours(x, x, x, average_attn_weights=False)
    assert (w.detach().numpy() == 0).any()  # some attention weights dropped


@needs_torch
def test_mha_state_dict_keys_and_init():
    for kw in [{}, {"kdim": 4, "vdim": 6, "add_bias_kv": True}, {"bias": False}]:
        ref = torch.nn.MultiheadAttention(8, 2, **kw)
        ours = nn.MultiheadAttention(8, 2, **kw)
        assert list(ours.state_dict()) == list(ref.state_dict())
        for (name, p), (_, r) in zip(ours.state_dict().items(), ref.state_dict().items()):
            assert tuple(p.shape) == tuple(r.shape), name
    ours = nn.MultiheadAttention(8, 2)
    assert not ours.in_proj_bias.detach().numpy().any() and not ours.out_proj.bias.detach().numpy().any()
    limit = np.sqrt(6 / (8 + 24))  # xavier uniform over (3E, E)
    w = ours.in_proj_weight.detach().numpy()
    assert np.abs(w).max() <= limit and w.std() > limit / 3


def test_mha_errors():
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(ValueError, match="greater than 0"):
        nn.MultiheadAttention(0, 2)
    mha = nn.MultiheadAttention(8, 2)
    x = serve.randn(5, 2, 8)
    with pytest.raises(RuntimeError, match="The shape of the 2D attn_mask is"):
        mha(x, x, x, attn_mask=serve.zeros(4, 5))
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        mha(x, x, x, is_causal=True)
    with pytest.raises(ValueError, match="key_padding_mask"):
        mha(x, x, x, key_padding_mask=serve.zeros(2, 4, dtype=serve.bool))
    with pytest.raises(TypeError, match="only bool and floating types"):
        mha(x, x, x, key_padding_mask=serve.zeros(2, 5, dtype=serve.int64))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_sdpa_other_dtypes(dtype):
    m = _bool_mask((4, 5))
    tol = 1e-2 if dtype != "float64" else 1e-10
    check_op(
        [(2, 4, 8), (2, 5, 8), (2, 5, 6)],
        lambda lib, q, k, v: lib.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=_mask(lib, m)),
        dtype=dtype, grad=dtype == "float64", atol=tol, rtol=tol, fd=False,
    )  # fmt: skip
