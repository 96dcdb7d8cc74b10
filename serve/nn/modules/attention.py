"""`nn.MultiheadAttention` (PyTorch keeps it in `torch.nn.modules.activation`; it lives apart here).

Parameters and `state_dict` keys are PyTorch's: `in_proj_weight`/`in_proj_bias` when kdim == vdim == embed_dim,
else `q_proj_weight`/`k_proj_weight`/`v_proj_weight`; `out_proj.weight`/`out_proj.bias`; `bias_k`/`bias_v` with
`add_bias_kv`. The computation is `F.multi_head_attention_forward`.

A query whose keys are all masked gets what PyTorch gives it: NaN with `need_weights=True` or on PyTorch's
inference fast path (eval mode, no grad, batched self-attention with bool masks, ...), else the output
projection of zeros (scaled_dot_product_attention's safe softmax).
"""

from __future__ import annotations

from typing import Any

from serve.nn import init
from serve.nn.functional.attention import multi_head_attention_forward
from serve.nn.module import Module
from serve.nn.modules.linear import Linear
from serve.nn.parameter import Parameter
from serve.tensor.creation import empty
from serve.tensor.grad_mode import is_grad_enabled
from serve.tensor.tensor import Tensor

__all__ = ["MultiheadAttention"]


class MultiheadAttention(Module):
    """Attention over `num_heads` heads of size embed_dim // num_heads, as in "Attention Is All You Need"."""

    bias_k: Parameter | None
    bias_v: Parameter | None

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device: Any = None,
                 dtype: Any = None) -> None:  # fmt: skip
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                f"num_heads={num_heads} instead"
            )
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise ValueError(f"embed_dim must be divisible by num_heads, got {embed_dim} and {num_heads}")
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty((3 * embed_dim, embed_dim), **kw))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = Parameter(empty((embed_dim, embed_dim), **kw))
            self.k_proj_weight = Parameter(empty((embed_dim, self.kdim), **kw))
            self.v_proj_weight = Parameter(empty((embed_dim, self.vdim), **kw))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k = Parameter(empty((1, 1, embed_dim), **kw))
            self.bias_v = Parameter(empty((1, 1, embed_dim), **kw))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """(output, weights): output shaped like `query`; weights (N, L, S), (N, heads, L, S) or None."""
        separate = not self._qkv_same_embed_dim
        # the explicit-weights path has PyTorch's fast-path semantics for fully masked rows (NaN), at no extra cost
        explicit = need_weights or self._on_torch_fast_path(query, key, value, key_padding_mask, attn_mask)
        out, weights = multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight, self.in_proj_bias,
            self.bias_k, self.bias_v, self.add_zero_attn, self.dropout, self.out_proj.weight, self.out_proj.bias,
            training=self.training, key_padding_mask=key_padding_mask, need_weights=explicit,
            attn_mask=attn_mask, use_separate_proj_weight=separate, q_proj_weight=self.q_proj_weight,
            k_proj_weight=self.k_proj_weight, v_proj_weight=self.v_proj_weight,
            average_attn_weights=average_attn_weights and need_weights, is_causal=is_causal,
            batch_first=self.batch_first,
        )  # fmt: skip
        return out, (weights if need_weights else None)

    def _on_torch_fast_path(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None,
                            attn_mask: Tensor | None) -> bool:  # fmt: skip
        """Whether PyTorch would run this masked call on its inference fast path (only masks make it differ)."""
        masks = [m for m in (key_padding_mask, attn_mask) if m is not None]
        if not masks or any(m.is_floating_point() for m in masks):
            return False
        if self.training or query.ndim != 3 or not (query is key and key is value) or not self.batch_first:
            return False
        if self.in_proj_bias is None or not self._qkv_same_embed_dim or self.num_heads % 2:
            return False
        if self.bias_k is not None or self.add_zero_attn:
            return False
        return not (is_grad_enabled() and (query.requires_grad or any(p.requires_grad for p in self.parameters())))
