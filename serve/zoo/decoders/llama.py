"""The Llama-like decoder: Llama (2, 3, 3.x; TinyLlama, SmolLM), Mistral, Qwen2, Qwen3 and Phi-3 are one block
with flags, read from Hugging Face checkpoints (`model.layers.N.self_attn.q_proj.weight`, ...).

The block is pre-norm: x += o_proj(attention(rope(q), rope(k), v)) over RMSNorm(x), then x += down(silu(gate) * up)
over RMSNorm(x). What differs, as flags from config.py:
- Qwen2: bias on q, k and v (not on o); Llama's `attention_bias` puts it on all four, and `mlp_bias` on the MLP.
- Qwen3: RMSNorm over each head of q and k (`q_norm`, `k_norm`, (head_dim,) weights) before RoPE.
- Mistral, and Qwen2/Qwen3 layers of `layer_types` "sliding_attention": a sliding window in attention.
- Phi-3: q, k, v stored fused as `qkv_proj` and gate, up as `gate_up_proj`, already in the order used here.
Decisions, and why:
- Q, K and V are one product and gate and up another (weights concatenated at load): one (T, hidden) @ (hidden,
  (heads + 2 kv_heads) * head_dim) product per layer instead of three reads of the activations.
- Tied embeddings: the token lookup reads rows of the embedding; the output projection is it transposed and packed
  (a second copy, in the layout the largest product of the step wants).
- Logits only for `logits_indices`: the final norm and the vocabulary product run on those rows alone.
"""

from __future__ import annotations

import numpy as np

from serve.zoo.decoders.attention import paged_attention
from serve.zoo.decoders.config import DecoderConfig
from serve.zoo.decoders.layers import Linear, rms_norm, silu_and_mul
from serve.zoo.decoders.rope import Rope, context_length
from serve.zoo.decoders.step import DecoderSpec, KVCache, StepBatch
from serve.zoo.decoders.weights import Weights

__all__ = ["LlamaDecoder"]


class _Block:
    def __init__(self, c: DecoderConfig, w: Weights, i: int, linear_dtype: str) -> None:
        p, dtype = f"model.layers.{i}.", np.dtype(np.float32)
        q_out, kv_out = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        h, inner = c.hidden_size, c.intermediate_size

        def linear(parts: list[tuple[str, int]], n_in: int, bias: bool) -> Linear:
            """The Linear of these torch Linears (name, out_features) side by side: (n_in, sum of outs)."""
            weights = [w.take(f"{p}{name}.weight", (out, n_in), dtype, transpose=True) for name, out in parts]
            biases = [w.take(f"{p}{name}.bias", (out,), dtype) for name, out in parts] if bias else None
            fused = weights[0] if len(weights) == 1 else np.concatenate(weights, axis=1)
            return Linear(fused, None if biases is None else np.concatenate(biases), linear_dtype)

        self.input_norm = w.take(p + "input_layernorm.weight", (h,), dtype)
        self.post_norm = w.take(p + "post_attention_layernorm.weight", (h,), dtype)
        if c.model_type == "phi3":
            self.qkv = linear([("self_attn.qkv_proj", q_out + 2 * kv_out)], h, False)
            self.gate_up = linear([("mlp.gate_up_proj", 2 * inner)], h, False)
        else:
            qkv = [("self_attn.q_proj", q_out), ("self_attn.k_proj", kv_out), ("self_attn.v_proj", kv_out)]
            self.qkv = linear(qkv, h, c.attention_bias)
            self.gate_up = linear([("mlp.gate_proj", inner), ("mlp.up_proj", inner)], h, c.mlp_bias)
        self.o_proj = linear([("self_attn.o_proj", h)], q_out, c.attention_bias and c.model_type != "qwen2")
        self.down = linear([("mlp.down_proj", h)], inner, c.mlp_bias)
        if c.qk_norm:
            self.q_norm = w.take(p + "self_attn.q_norm.weight", (c.head_dim,), dtype)
            self.k_norm = w.take(p + "self_attn.k_norm.weight", (c.head_dim,), dtype)
        self.window = c.sliding_windows[i]


class LlamaDecoder:
    """A Llama-like decoder implementing step.py's Decoder protocol."""

    block_type = _Block  # gemma.py's subclass reads its extra norms in its own

    def __init__(self, config: DecoderConfig, weights: Weights, linear_dtype: str = "float32") -> None:
        c = self.config = config
        dtype = np.dtype(np.float32)  # activations, norms and the KV cache; linear_dtype is the products' weights
        assert c.rope is not None  # config.py gives every Llama-like config one
        self.rope = Rope(c.rope, c.head_dim)
        self.spec = DecoderSpec(
            c.num_layers, c.num_kv_heads, c.head_dim, c.vocab_size,
            c.max_position_embeddings if c.model_type.startswith("gemma") else context_length(c.rope),  # vLLM's rule
            dtype,
            prefix_caching=c.rope.rope_type != "dynamic",  # its keys depend on the sequence's length (rope.py)
        )  # fmt: skip
        embed = weights.take("model.embed_tokens.weight", (c.vocab_size, c.hidden_size), dtype)
        self.blocks = [self.block_type(c, weights, i, linear_dtype) for i in range(c.num_layers)]
        self.norm = weights.take("model.norm.weight", (c.hidden_size,), dtype)
        if c.tie_word_embeddings:
            weights.arrays.pop("lm_head.weight", None)  # some tied checkpoints store the copy too
            self.lm_head = Linear(embed.T, None, linear_dtype)  # (hidden, vocab)
        else:
            lm_head = weights.take("lm_head.weight", (c.vocab_size, c.hidden_size), dtype, True)
            self.lm_head = Linear(lm_head, None, linear_dtype)
        self.embed = embed  # (vocab, hidden)
        weights.finish(ignore=("rotary_emb.inv_freq",))

    def step(self, batch: StepBatch, cache: KVCache) -> np.ndarray:
        c = self.config
        x = self.embed[batch.input_ids]  # (T, hidden)
        cos, sin = self.rope.for_step(batch)
        for layer, block in enumerate(self.blocks):
            h = rms_norm(x, block.input_norm, c.norm_eps)
            x = self._attention(block, h, cos, sin, layer, batch, cache, residual=x)  # x + o_proj(attention)
            h = silu_and_mul(block.gate_up(rms_norm(x, block.post_norm, c.norm_eps)))  # (T, intermediate)
            x = block.down(h, residual=x)  # x + down(h), the add in the product's epilogue
        x = rms_norm(x[batch.logits_indices], self.norm, c.norm_eps)  # (L, hidden)
        return self.lm_head(x).astype(np.float32, copy=False)  # (L, vocab)

    def _attention(
        self, b: _Block, h: np.ndarray, cos: np.ndarray, sin: np.ndarray, layer: int, batch: StepBatch, cache: KVCache,
        residual: np.ndarray | None = None,
    ) -> np.ndarray:  # fmt: skip
        """o_proj(attention(h)), plus `residual` when given (added in the product's epilogue)."""
        c = self.config
        t, d = h.shape[0], c.head_dim
        qkv = b.qkv(h)  # (T, (heads + 2 kv_heads) * head_dim)
        q_end, k_end = c.num_heads * d, (c.num_heads + c.num_kv_heads) * d
        rotated = not c.qk_norm and self.rope.apply_(qkv, c.num_heads + c.num_kv_heads, d, cos, sin)  # q, k in place
        q = qkv[:, :q_end].reshape(t, c.num_heads, d)  # (T, heads, head_dim)
        k = qkv[:, q_end:k_end].reshape(t, c.num_kv_heads, d)  # (T, kv_heads, head_dim)
        v = qkv[:, k_end:].reshape(t, c.num_kv_heads, d)
        if c.qk_norm:
            q, k = rms_norm(q, b.q_norm, c.norm_eps), rms_norm(k, b.k_norm, c.norm_eps)
        if not rotated:
            q, k = self.rope.apply(q, cos, sin), self.rope.apply(k, cos, sin)
        cache.write(layer, k, v, batch.slot_mapping)
        scale = None if c.query_pre_attn_scalar is None else c.query_pre_attn_scalar**-0.5  # None: 1/sqrt(head_dim)
        y = paged_attention(q, cache, layer, batch, b.window, scale, c.attn_logit_softcapping)  # (T, heads, head_dim)
        return b.o_proj(y.reshape(t, c.num_heads * d), residual=residual)  # (T, hidden)
