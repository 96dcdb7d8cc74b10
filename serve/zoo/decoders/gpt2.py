"""GPT-2 from a Hugging Face checkpoint (`transformer.h.N.attn.c_attn.weight`, ...), over the paged KV cache.

GPT-2's block is pre-LayerNorm: x += c_proj(attention(q, k, v)) with q, k, v from one c_attn product, then
x += c_proj(gelu_tanh(c_fc(x))); learned absolute positions (`wpe`) are added to the token embeddings; the output
projection is the token embedding, transposed (tied).
Decisions, and why:
- Hugging Face's GPT-2 stores its projections as Conv1D, weight (in, out): already the `x @ W` layout, so they are
  taken as stored (no transpose), unlike the Llama family's nn.Linear (out, in).
- Tied: the token lookup reads rows of `wte`; the output projection is `wte` transposed and packed (a second copy
  in the kernel's layout, what the largest product of the step wants).
"""

from __future__ import annotations

import numpy as np

from serve.errors import CheckpointError
from serve.zoo.decoders.attention import paged_attention
from serve.zoo.decoders.config import DecoderConfig
from serve.zoo.decoders.layers import Linear, layer_norm
from serve.zoo.decoders.step import DecoderSpec, KVCache, StepBatch
from serve.zoo.decoders.weights import Weights

__all__ = ["GPT2Decoder"]


class _Block:
    def __init__(self, c: DecoderConfig, w: Weights, i: int, linear_dtype: str) -> None:
        p, h, inner, dtype = f"transformer.h.{i}.", c.hidden_size, c.intermediate_size, np.dtype(np.float32)

        def conv1d(name: str, n_in: int, n_out: int) -> Linear:
            weight, bias = (
                w.take(p + name + ".weight", (n_in, n_out), dtype),
                w.take(p + name + ".bias", (n_out,), dtype),
            )
            return Linear(weight, bias, linear_dtype)

        self.ln_1 = (w.take(p + "ln_1.weight", (h,), dtype), w.take(p + "ln_1.bias", (h,), dtype))
        self.ln_2 = (w.take(p + "ln_2.weight", (h,), dtype), w.take(p + "ln_2.bias", (h,), dtype))
        self.c_attn, self.attn_proj = conv1d("attn.c_attn", h, 3 * h), conv1d("attn.c_proj", h, h)
        self.c_fc, self.mlp_proj = conv1d("mlp.c_fc", h, inner), conv1d("mlp.c_proj", inner, h)


class GPT2Decoder:
    """GPT-2 implementing step.py's Decoder protocol."""

    def __init__(self, config: DecoderConfig, weights: Weights, linear_dtype: str = "float32") -> None:
        c = self.config = config
        dtype = np.dtype(np.float32)  # activations, norms and the KV cache; linear_dtype is the products' weights
        if not c.tie_word_embeddings:
            raise CheckpointError("config.json: tie_word_embeddings false is not supported for gpt2 (no lm_head)")
        self.spec = DecoderSpec(c.num_layers, c.num_heads, c.head_dim, c.vocab_size, c.max_position_embeddings, dtype)
        wte = weights.take("transformer.wte.weight", (c.vocab_size, c.hidden_size), dtype)
        self.wpe = weights.take("transformer.wpe.weight", (c.max_position_embeddings, c.hidden_size), dtype)
        self.blocks = [_Block(c, weights, i, linear_dtype) for i in range(c.num_layers)]
        self.ln_f = (
            weights.take("transformer.ln_f.weight", (c.hidden_size,), dtype),
            weights.take("transformer.ln_f.bias", (c.hidden_size,), dtype),
        )
        weights.arrays.pop("lm_head.weight", None)  # tied: some checkpoints store the copy too
        self.lm_head = Linear(wte.T, dtype=linear_dtype)  # (hidden, vocab), packed
        self.wte = wte  # (vocab, hidden)
        weights.finish(ignore=(".attn.bias", ".attn.masked_bias"))  # causal-mask buffers of old checkpoints

    def step(self, batch: StepBatch, cache: KVCache) -> np.ndarray:
        c = self.config
        x = self.wte[batch.input_ids] + self.wpe[batch.positions]  # (T, hidden)
        for layer, b in enumerate(self.blocks):
            x = self._attention(b, layer_norm(x, *b.ln_1, c.norm_eps), layer, batch, cache, x)  # x + attention
            h = b.c_fc(layer_norm(x, *b.ln_2, c.norm_eps), act="gelu_tanh")  # (T, inner), GELU in the epilogue
            x = b.mlp_proj(h, residual=x)  # x + c_proj(h)
        x = layer_norm(x[batch.logits_indices], *self.ln_f, c.norm_eps)  # (L, hidden)
        return self.lm_head(x).astype(np.float32, copy=False)  # (L, vocab)

    def _attention(
        self, b: _Block, h: np.ndarray, layer: int, batch: StepBatch, cache: KVCache, x: np.ndarray
    ) -> np.ndarray:
        """x + c_proj(attention(h)): the residual added in the product's epilogue."""
        c = self.config
        t = h.shape[0]
        qkv = b.c_attn(h).reshape(t, 3, c.num_heads, c.head_dim)  # (T, 3, heads, head_dim)
        q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
        cache.write(layer, k, v, batch.slot_mapping)
        y = paged_attention(q, cache, layer, batch, None)  # (T, heads, head_dim)
        return b.attn_proj(y.reshape(t, c.hidden_size), residual=x)  # (T, hidden)
