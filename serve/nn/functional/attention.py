"""Attention: `scaled_dot_product_attention` and the `multi_head_attention_forward` behind nn.MultiheadAttention.

Both follow PyTorch's math path: softmax(q @ k^T * scale + mask) @ v. As in PyTorch, a query row whose keys are
all masked gives zeros from `scaled_dot_product_attention` (its safe softmax) but NaN from the explicit
`need_weights=True` path of multi-head attention (a plain softmax).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from serve.nn.functional._array_path import math_for, records, unwrap, wrap
from serve.nn.functional.dropout import dropout
from serve.nn.functional.linear import linear
from serve.tensor import dtypes
from serve.tensor.creation import ones
from serve.tensor.shape_ops import cat
from serve.tensor.tensor import Tensor

__all__ = ["multi_head_attention_forward", "scaled_dot_product_attention"]

_NEG_INF = float("-inf")


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """softmax(query @ key^T * scale + mask) @ value over the last two dims (..., L, E) x (..., S, E) x (..., S, Ev).

    A bool `attn_mask` marks the positions that may attend (True); a float mask is added to the scores.
    """
    _check_sdpa_inputs(query, key, value, attn_mask, is_causal, enable_gqa)
    if enable_gqa:
        key, value = _repeat_heads(key, query.shape[-3]), _repeat_heads(value, query.shape[-3])
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if is_causal:
        # top-left aligned, as PyTorch: row i sees keys 0..i, so no row is ever fully masked
        attn_mask = ones((query.shape[-2], key.shape[-2]), dtype=dtypes.bool, device=query.device).tril()
    return _attention_output(query, key, value, attn_mask, scale, dropout_p, safe=not is_causal)


def _attention_output(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float, dropout_p: float, safe: bool
) -> Tensor:
    """softmax(q @ k^T * scale + mask) @ v alone. When nothing records a graph and there is no dropout, a backend's
    fused `attention` primitive (where it has one and it applies) computes it without making the scores whole."""
    mask, is_bool = _checked_mask(q, mask)
    if dropout_p == 0.0 and not records(q, k, v, mask):
        fused = getattr(q._ops, "attention", None)
        out = None if fused is None else fused(q._data, k._data, v._data, unwrap(mask, True), is_bool, safe, scale)
        if out is not None:
            return wrap(out, q)
    return _attention(q, k, v, mask, scale, dropout_p, safe)[0]


def _attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float, dropout_p: float, safe: bool
) -> tuple[Tensor, Tensor]:
    """(softmax(q @ k^T * scale + mask) @ v, the softmax). A bool mask marks the allowed positions.

    With `safe`, rows whose keys are all masked give zeros (PyTorch's safe softmax), else NaN (a plain softmax).
    """
    mask, is_bool = _checked_mask(q, mask)
    on_arrays = dropout_p == 0.0 and not records(q, k, v, mask)
    m = math_for(on_arrays, q)
    qa, ka, va, ma = (unwrap(t, on_arrays) for t in (q, k, v, mask))
    scores = m.matmul(qa * scale, ka.swapaxes(-2, -1))  # (..., L, S)
    # on arrays, the backend's fused primitive (one kernel on CUDA); recording, the same steps on Tensors
    probs = m.masked_softmax(scores, ma, is_bool, safe) if on_arrays else _masked_softmax(m, scores, ma, is_bool, safe)
    if dropout_p > 0.0:
        probs = dropout(probs, dropout_p)
    out = m.matmul(probs, va)  # (..., L, Ev)
    return (wrap(out, q), wrap(probs, q)) if on_arrays else (out, probs)


def _checked_mask(q: Tensor, mask: Tensor | None) -> tuple[Tensor | None, bool]:
    """The mask as attention uses it (a float mask in the query's dtype) and whether it is a bool mask."""
    is_bool = mask is not None and mask.dtype is dtypes.bool
    if mask is not None and not is_bool and mask.dtype is not q.dtype:
        if mask.dtype is not dtypes.float32:
            raise RuntimeError(
                "Expected attn_mask dtype to be bool or float or to match query dtype, but got attn_mask.dtype: "
                f"{mask.dtype} and query.dtype: {q.dtype} instead."
            )
        mask = mask.to(q.dtype)  # the result keeps the query's dtype
    return mask, is_bool


def _masked_softmax(m: Any, scores: Any, mask: Any, is_bool: bool, safe: bool) -> Any:
    if mask is None:
        return m.softmax(scores, -1)
    if is_bool:
        scores = m.where(mask, scores, _NEG_INF)
        dead = m.logical_not(m.any(mask, -1, True)) if safe else None
    else:
        scores = scores + mask
        dead = m.all(mask == _NEG_INF, -1, True) if safe else None
    if dead is None or not dead.any():
        return m.softmax(scores, -1)
    # zero the scores of dead rows first, so neither the softmax nor its gradient sees a row of -inf (NaN)
    return m.where(dead, 0.0, m.softmax(m.where(dead, 0.0, scores), -1))


def _repeat_heads(t: Tensor, heads: int) -> Tensor:
    """Repeat each key/value head `heads // t.shape[-3]` times in place (grouped-query attention)."""
    kv_heads = t.shape[-3]
    if kv_heads == heads:
        return t
    rep = heads // kv_heads
    shape = tuple(t.shape)
    expanded = t.unsqueeze(-3).expand(*shape[:-2], rep, *shape[-2:])  # (..., Hk, rep, S, E)
    return expanded.reshape(*shape[:-3], heads, *shape[-2:])  # (..., Hq, S, E)


def _check_sdpa_inputs(
    query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None, is_causal: bool, enable_gqa: bool
) -> None:
    if query.dtype != key.dtype or query.dtype != value.dtype:
        raise RuntimeError(
            "Expected query, key, and value to have the same dtype, but got query.dtype: "
            f"{query.dtype} key.dtype: {key.dtype} and value.dtype: {value.dtype} instead."
        )
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise RuntimeError("scaled_dot_product_attention: query, key and value must have at least 2 dimensions")
    if query.shape[-1] != key.shape[-1]:
        raise RuntimeError(
            f"scaled_dot_product_attention: query's last dim ({query.shape[-1]}) must equal key's ({key.shape[-1]})"
        )
    if key.shape[-2] != value.shape[-2]:
        raise RuntimeError(
            f"scaled_dot_product_attention: key and value must have the same sequence length, got "
            f"{key.shape[-2]} and {value.shape[-2]}"
        )
    if enable_gqa and query.ndim >= 3 and key.ndim >= 3 and query.shape[-3] % key.shape[-3]:
        raise RuntimeError("Number of heads in key and value must divide the number of heads in query")
    if attn_mask is not None and is_causal:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")


def multi_head_attention_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    embed_dim_to_check: int,
    num_heads: int,
    in_proj_weight: Tensor | None,
    in_proj_bias: Tensor | None,
    bias_k: Tensor | None,
    bias_v: Tensor | None,
    add_zero_attn: bool,
    dropout_p: float,
    out_proj_weight: Tensor,
    out_proj_bias: Tensor | None,
    training: bool = True,
    key_padding_mask: Tensor | None = None,
    need_weights: bool = True,
    attn_mask: Tensor | None = None,
    use_separate_proj_weight: bool = False,
    q_proj_weight: Tensor | None = None,
    k_proj_weight: Tensor | None = None,
    v_proj_weight: Tensor | None = None,
    static_k: Tensor | None = None,
    static_v: Tensor | None = None,
    average_attn_weights: bool = True,
    is_causal: bool = False,
    *,
    batch_first: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """PyTorch's multi-head attention on (L, N, E) inputs, (N, L, E) with `batch_first` (serve's addition, which
    saves nn.MultiheadAttention two transposes and a copy), or unbatched (L, E).

    Returns (output, weights): weights (N, L, S) averaged over heads, (N, heads, L, S) per head, or None
    when `need_weights` is False.
    """
    is_batched = _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not is_batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
        batch_first = False
    seq = 1 if batch_first else 0
    tgt_len, bsz, embed_dim = query.shape[seq], query.shape[1 - seq], query.shape[2]
    if embed_dim != embed_dim_to_check:
        raise ValueError(f"was expecting embedding dimension of {embed_dim_to_check}, but got {embed_dim}")
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    key_padding_mask, attn_mask, is_causal = _mha_masks(key_padding_mask, attn_mask, is_causal, need_weights, query)
    if attn_mask is not None:
        attn_mask = _heads_mask(attn_mask, bsz, num_heads, tgt_len, key.shape[seq])
    layout = (num_heads, batch_first)  # how _split_heads cuts the projections into (N, heads, L or S, head_dim)
    if use_separate_proj_weight:
        q, k, v = _in_projection(query, key, value, q_proj_weight, k_proj_weight, v_proj_weight, in_proj_bias, layout)
    else:
        q, k, v = _in_projection_packed(query, key, value, in_proj_weight, in_proj_bias, layout)
    k, v, attn_mask, key_padding_mask = _extra_keys(
        k, v, bias_k, bias_v, static_k, static_v, add_zero_attn, attn_mask, key_padding_mask
    )
    attn_mask = _merge_key_padding(attn_mask, key_padding_mask, bsz, k.shape[2])
    dropout_p = dropout_p if training else 0.0
    weights = None
    if need_weights:
        out, weights = _attention(q, k, v, attn_mask, 1.0 / math.sqrt(q.shape[-1]), dropout_p, safe=False)
        weights = weights.mean(1) if average_attn_weights else weights  # (N, L, S) or (N, heads, L, S)
        weights = weights if is_batched else weights.squeeze(0)
    else:
        out = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
    out = out.permute(0, 2, 1, 3) if batch_first else out.permute(2, 0, 1, 3)  # (N, L, heads, hd) or (L, N, ...)
    out = linear(out.reshape(*out.shape[:2], embed_dim), out_proj_weight, out_proj_bias)
    return (out if is_batched else out.squeeze(1)), weights


def _mha_masks(
    key_padding_mask: Tensor | None, attn_mask: Tensor | None, is_causal: bool, need_weights: bool, query: Tensor
) -> tuple[Tensor | None, Tensor | None, bool]:
    """Both masks as float masks, and whether the causal hint stays (only when it alone describes the mask)."""
    key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask", query.dtype, attn_mask, "attn_mask")
    if is_causal and attn_mask is None:
        raise RuntimeError(
            "Need attn_mask if specifying the is_causal hint. You may use the Transformer module method "
            "`generate_square_subsequent_mask` to create this mask."
        )
    if is_causal and key_padding_mask is None and not need_weights:
        return None, None, True  # the hint alone drives the causal masking of scaled_dot_product_attention
    return key_padding_mask, _canonical_mask(attn_mask, "attn_mask", query.dtype), False


def _mha_shape_check(
    query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None, attn_mask: Tensor | None, heads: int
) -> bool:
    """True for batched (3-d) inputs, False for unbatched (2-d); ValueError for any other combination."""
    if query.ndim not in (2, 3):
        raise ValueError(f"query should be unbatched 2D or batched 3D tensor but received {query.ndim}-D query tensor")
    batched = query.ndim == 3
    kind = "batched (3-D)" if batched else "unbatched (2-D)"
    if key.ndim != query.ndim or value.ndim != query.ndim:
        raise ValueError(
            f"For {kind} `query`, expected `key` and `value` to be {query.ndim}-D but found {key.ndim}-D and "
            f"{value.ndim}-D tensors respectively"
        )
    if key_padding_mask is not None and key_padding_mask.ndim != query.ndim - 1:
        raise ValueError(
            f"For {kind} `query`, expected `key_padding_mask` to be `None` or {query.ndim - 1}-D but found "
            f"{key_padding_mask.ndim}-D tensor instead"
        )
    if attn_mask is not None and attn_mask.ndim not in (2, 3):
        raise ValueError(
            f"For {kind} `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found {attn_mask.ndim}-D tensor "
            "instead"
        )
    if not batched and attn_mask is not None and attn_mask.ndim == 3:
        expected = (heads, query.shape[0], key.shape[0])
        if tuple(attn_mask.shape) != expected:
            raise ValueError(f"Expected `attn_mask` shape to be {expected} but got {tuple(attn_mask.shape)}")
    return batched


def _canonical_mask(
    mask: Tensor | None, name: str, target: dtypes.dtype, other: Tensor | None = None, other_name: str = ""
) -> Tensor | None:
    """A bool mask (True = masked) as a float mask of `target` dtype (-inf = masked); float masks pass through."""
    if mask is None:
        return None
    if mask.dtype is not dtypes.bool and not mask.is_floating_point():
        raise TypeError(f"only bool and floating types of {name} are supported")
    if other is not None and other.dtype != mask.dtype:
        warnings.warn(
            f"Support for mismatched {name} and {other_name} is deprecated. Use same type for both instead.",
            stacklevel=3,
        )
    if mask.is_floating_point():
        return mask
    return mask.new_zeros(mask.shape, dtype=target).masked_fill(mask, _NEG_INF)


def _in_projection_packed(
    q: Tensor, k: Tensor, v: Tensor, w: Tensor | None, b: Tensor | None, layout: tuple[int, bool]
) -> tuple[Tensor, ...]:
    """q, k, v projected by the packed (3E, E) weight, each (N, heads, L or S, head_dim): one matrix product
    for self-attention, two when key is value."""
    if w is None:
        raise ValueError("use_separate_proj_weight is False but in_proj_weight is None")
    if k.shape != v.shape:
        raise ValueError(f"key shape {tuple(k.shape)} does not match value shape {tuple(v.shape)}")
    e = q.shape[-1]
    if k is v:
        if q is k:
            return _split_heads(linear(q, w, b), *layout, parts=3)
        w_q, w_kv = w.split([e, 2 * e])
        b_q, b_kv = (None, None) if b is None else b.split([e, 2 * e])
        return _split_heads(linear(q, w_q, b_q), *layout) + _split_heads(linear(k, w_kv, b_kv), *layout, parts=2)
    w_q, w_k, w_v = w.chunk(3)
    return _in_projection(q, k, v, w_q, w_k, w_v, b, layout)


def _in_projection(
    q: Tensor, k: Tensor, v: Tensor, w_q: Tensor | None, w_k: Tensor | None, w_v: Tensor | None, b: Tensor | None,
    layout: tuple[int, bool],
) -> tuple[Tensor, ...]:  # fmt: skip
    """q, k, v projected by their own weights (key and value dims may differ from the embedding dim), each
    (N, heads, L or S, head_dim)."""
    if w_q is None or w_k is None or w_v is None:
        raise ValueError("use_separate_proj_weight is True but q_proj_weight, k_proj_weight or v_proj_weight is None")
    if tuple(k.shape[:2]) != tuple(v.shape[:2]):
        raise ValueError(
            f"key's sequence and batch dims {tuple(k.shape[:2])} do not match value's {tuple(v.shape[:2])}"
        )
    b_q, b_k, b_v = (None, None, None) if b is None else b.chunk(3)
    q, k, v = linear(q, w_q, b_q), linear(k, w_k, b_k), linear(v, w_v, b_v)
    return _split_heads(q, *layout) + _split_heads(k, *layout) + _split_heads(v, *layout)


def _extra_keys(
    k: Tensor, v: Tensor, bias_k: Tensor | None, bias_v: Tensor | None, static_k: Tensor | None,
    static_v: Tensor | None, add_zero_attn: bool, attn_mask: Tensor | None, key_padding_mask: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:  # fmt: skip
    """k and v (N, heads, S, head_dim) with the learnt bias key, static keys and the zero key applied, and the
    masks widened by one (unmasked) column for each key added."""
    bsz, heads, _, head_dim = k.shape
    if (bias_k is None) != (bias_v is None):
        raise ValueError("bias_k and bias_v must be both set or both None")
    if bias_k is not None and bias_v is not None:
        if static_k is not None or static_v is not None:
            raise ValueError("bias cannot be added to static key or value.")
        k = cat([k, bias_k.reshape(1, heads, 1, head_dim).expand(bsz, -1, -1, -1)], 2)  # (N, heads, S + 1, hd)
        v = cat([v, bias_v.reshape(1, heads, 1, head_dim).expand(bsz, -1, -1, -1)], 2)
        attn_mask, key_padding_mask = _pad_key(attn_mask), _pad_key(key_padding_mask)
    k = k if static_k is None else _static(static_k, "static_k", bsz, heads, head_dim)
    v = v if static_v is None else _static(static_v, "static_v", bsz, heads, head_dim)
    if add_zero_attn:
        k, v = (cat([t, t.new_zeros((bsz, heads, 1, head_dim))], 2) for t in (k, v))  # (N, heads, S + 1, hd)
        attn_mask, key_padding_mask = _pad_key(attn_mask), _pad_key(key_padding_mask)
    return k, v, attn_mask, key_padding_mask


def _merge_key_padding(attn_mask: Tensor | None, key_padding_mask: Tensor | None, bsz: int, src_len: int
                       ) -> Tensor | None:  # fmt: skip
    """The key padding mask (N, S) added to the attention mask, broadcasting over (N, heads, L, S)."""
    if key_padding_mask is None:
        return attn_mask
    if tuple(key_padding_mask.shape) != (bsz, src_len):
        raise ValueError(
            f"Expected key_padding_mask of shape {(bsz, src_len)}, but got {tuple(key_padding_mask.shape)}"
        )
    kpm = key_padding_mask.view(bsz, 1, 1, src_len)
    return kpm if attn_mask is None else attn_mask + kpm


def _heads_mask(mask: Tensor, bsz: int, heads: int, tgt_len: int, src_len: int) -> Tensor:
    """A (L, S) or (N*heads, L, S) attention mask, checked, as a mask broadcasting over (N, heads, L, S)."""
    if mask.ndim == 2:
        if tuple(mask.shape) != (tgt_len, src_len):
            raise RuntimeError(
                f"The shape of the 2D attn_mask is {tuple(mask.shape)}, but should be {(tgt_len, src_len)}."
            )
        return mask
    if tuple(mask.shape) != (bsz * heads, tgt_len, src_len):
        raise RuntimeError(
            f"The shape of the 3D attn_mask is {tuple(mask.shape)}, but should be {(bsz * heads, tgt_len, src_len)}."
        )
    return mask.view(bsz, heads, tgt_len, src_len)


def _pad_key(mask: Tensor | None) -> Tensor | None:
    """One more (unmasked) key column at the end of `mask`, for an appended bias or zero key."""
    if mask is None:
        return None
    return cat([mask, mask.new_zeros((*mask.shape[:-1], 1))], -1)


def _split_heads(x: Tensor, heads: int, batch_first: bool, parts: int = 1) -> tuple[Tensor, ...]:
    """(S, N, parts * E), or (N, S, parts * E) with `batch_first`, as `parts` views (N, heads, S, head_dim)."""
    lead = tuple(x.shape[:2])
    x = x.reshape(*lead, parts, heads, x.shape[2] // (parts * heads))  # (S, N, parts, heads, hd) or (N, S, ...)
    return (x.permute(2, 0, 3, 1, 4) if batch_first else x.permute(2, 1, 3, 0, 4)).unbind(0)


def _static(t: Tensor, name: str, bsz: int, heads: int, head_dim: int) -> Tensor:
    if t.shape[0] != bsz * heads or t.shape[2] != head_dim:
        raise ValueError(f"expecting {name} of shape ({bsz * heads}, S, {head_dim}), but got {tuple(t.shape)}")
    return t.view(bsz, heads, t.shape[1], head_dim)  # (N, heads, S, head_dim)
