"""`nn.MultiheadAttention` in the plan: its two projections as planned linear layers.

`nn.MultiheadAttention` computes its input and output projections inside `F.multi_head_attention_forward` from its
weights, not by calling modules, so the capture sees no linear layer there: the projections ran as BLAS products
with the bias added in a second pass, and the output projection's residual add and the LayerNorm after it
(`norm1(x + self_attn(x, x, x)[0])` in `nn.TransformerEncoderLayer`) ran unfused. Here the attention module itself is
captured as one call (serve.inference.capture hooks it like a leaf, its output being the attention output) and
replaced by `PlannedMultiheadAttention`, which runs the same steps as the functional with a PlannedLinear for each
projection: the packed (3E, E) input projection on the native GEMM with its bias in the epilogue, and the output
projection, which the addnorm pass may let return its result pending so the residual add and the LayerNorm fuse
(serve.inference.addnorm).

Only self-attention (query, key and value one tensor) without returned weights runs planned, on batched float32
input, the packed projection weight, no bias_k/bias_v and no zero attention, and not on PyTorch's masked inference
fast path (whose fully masked rows are NaN: the original's explicit path gives that); every other call goes to the
original module, unchanged. The masks and the attention are the functional's own helpers, so the values are the
eager ones up to the products' rounding. Without a mask, the fused attention kernel writes each head's output
straight into its columns of the (N, L, E) (or (L, N, E)) array the output projection reads, through strides: no
permute-and-copy merging the heads (3 MiB per layer of a BERT-base-sized encoder at 8 x 128).

In a bfloat16 plan the attention's two products may run in bf16 (`products`, serve.inference.attention_products:
chosen per shape by timing against float32, listed in describe()["attention"] as `<module>.attention`); a masked call
also takes the fused kernel with the merged mask (causal: the top-left mask sdpa builds, rows never fully masked),
instead of scaled_dot_product_attention. A float32 plan runs exactly the float32 path.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from serve import nn
from serve.inference.attention_products import AttentionProducts
from serve.inference.epilogue import wrap
from serve.inference.planned import PlannedLinear
from serve.nn.functional import attention as mha
from serve.nn.module import Module
from serve.tensor import dtypes
from serve.tensor.grad_mode import state as grad_state
from serve.tensor.tensor import Tensor

__all__ = ["PlannedMultiheadAttention", "plannable_attention"]


def plannable_attention(module: Module) -> bool:
    """An nn.MultiheadAttention whose self-attention calls the plan can run (see the module docstring)."""
    if type(module) is not nn.MultiheadAttention or not module._qkv_same_embed_dim:
        return False
    if module.bias_k is not None or module.add_zero_attn:
        return False
    params = (module.in_proj_weight, module.in_proj_bias, module.out_proj.weight, module.out_proj.bias)
    return all(p is None or (p._dtype is dtypes.float32 and p._device.type == "cpu") for p in params)


class PlannedMultiheadAttention(Module):
    """Self-attention with planned projections; anything else runs the original module."""

    def __init__(self, original: nn.MultiheadAttention, name: str = "attention") -> None:
        super().__init__()
        self.original = original
        self.products_name = name  # describe()'s name for the attention's own products
        self.products = AttentionProducts()
        bias = None if original.in_proj_bias is None else original.in_proj_bias._data
        self.in_proj = PlannedLinear(None, None, None, arrays=(original.in_proj_weight._data, bias))
        self.out_proj = PlannedLinear(original.out_proj, None, None)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:  # fmt: skip
        m = self.original
        if not self._planned_call(query, key, value, key_padding_mask, need_weights, attn_mask):
            return m(query, key, value, key_padding_mask=key_padding_mask, need_weights=need_weights,
                     attn_mask=attn_mask, average_attn_weights=average_attn_weights, is_causal=is_causal)  # fmt: skip
        heads, batch_first = m.num_heads, m.batch_first
        mha._mha_shape_check(query, key, value, key_padding_mask, attn_mask, heads)
        seq = 1 if batch_first else 0
        tgt_len, bsz, embed_dim = query.shape[seq], query.shape[1 - seq], query.shape[2]
        if embed_dim != m.embed_dim:
            raise ValueError(f"was expecting embedding dimension of {m.embed_dim}, but got {embed_dim}")
        key_padding_mask, attn_mask, is_causal = mha._mha_masks(key_padding_mask, attn_mask, is_causal, False, query)
        if attn_mask is not None:
            attn_mask = mha._heads_mask(attn_mask, bsz, heads, tgt_len, tgt_len)
        q, k, v = mha._split_heads(self.in_proj(query), heads, batch_first, parts=3)  # each (N, heads, L, hd)
        attn_mask = mha._merge_key_padding(attn_mask, key_padding_mask, bsz, tgt_len)
        if attn_mask is None and not is_causal:
            merged = self._merged_heads(q, k, v, query, batch_first)
            if merged is not None:
                return self.out_proj(merged), None
        out = self._masked(q, k, v, attn_mask, is_causal)
        if out is None:
            out = mha.scaled_dot_product_attention(q, k, v, attn_mask, 0.0, is_causal)  # (N, heads, L, hd)
        out = out.permute(0, 2, 1, 3) if batch_first else out.permute(2, 0, 1, 3)  # (N, L, heads, hd) or (L, N, ..)
        return self.out_proj(out.reshape(*out.shape[:2], embed_dim)), None

    def _masked(self, q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, is_causal: bool) -> Tensor | None:
        """A bfloat16 plan's masked attention by the chosen kernel ((N, heads, L, hd)); None in a float32 plan or
        where the fused kernel does not apply (the caller runs sdpa)."""
        if self.products.product_dtype != "bfloat16" or (is_causal and attn_mask is not None):
            return None
        length, keys = q.shape[-2], k.shape[-2]
        if is_causal:  # sdpa's top-left causal mask: no row is ever fully masked
            mask: np.ndarray | None = np.tril(np.ones((length, keys), bool))
            is_bool, safe = True, False
        elif attn_mask is not None:
            checked, is_bool = mha._checked_mask(q, attn_mask)
            mask, safe = None if checked is None else checked._data, True
        else:
            mask, is_bool, safe = None, False, True
        done = self.products.run(q._data, k._data, v._data, mask, is_bool, safe, 1.0 / math.sqrt(q.shape[-1]))
        return None if done is None else wrap(done, q)

    def _merged_heads(self, q: Tensor, k: Tensor, v: Tensor, query: Tensor, batch_first: bool) -> Tensor | None:
        """Unmasked attention by the fused kernel, each head written into its columns of one (N, L, E) array
        ((L, N, E) unless batch_first); None where the kernel does not apply (the caller takes the sdpa path)."""
        n, heads, length, hd = q.shape
        lead = (n, length) if batch_first else (length, n)
        merged = np.empty((*lead, heads * hd), np.float32)
        order = (0, 2, 1, 3) if batch_first else (1, 2, 0, 3)
        view = merged.reshape(*lead, heads, hd).transpose(order)  # (N, heads, L, hd), strides of (.., .., E)
        done = self.products.run(q._data, k._data, v._data, None, False, True, 1.0 / math.sqrt(hd), out=view)
        return None if done is None else wrap(merged, query)

    def _planned_call(self, query: Any, key: Any, value: Any, key_padding_mask: Any, need_weights: bool,
                      attn_mask: Any) -> bool:  # fmt: skip
        if need_weights or not (query is key and key is value) or not isinstance(query, Tensor) or query.ndim != 3:
            return False
        if query._dtype is not dtypes.float32 or query._device.type != "cpu" or self.original.training:
            return False
        if grad_state.enabled and query._requires_grad:
            return False
        return not self.original._on_torch_fast_path(query, key, value, key_padding_mask, attn_mask)

    def extra_repr(self) -> str:
        m = self.original
        return f"{m.embed_dim}, heads={m.num_heads}, batch_first={m.batch_first}"
