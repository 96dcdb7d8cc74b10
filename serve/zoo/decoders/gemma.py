"""Gemma 2 and Gemma 3 (Gemma3ForCausalLM, and the text model of Gemma3ForConditionalGeneration, its vision tower
left out) from Hugging Face checkpoints: llama.py's decoder with Gemma's block, over the same paged KV cache.

Gemma (1) is Llama's block with Gemma's (1 + weight) norms, GeGLU and embedding scale. Gemma 2 and 3's block
(`model.layers.N.` with Llama's projection names) differs from Llama's in what surrounds the products:
    x += post_attention_norm(o_proj(attention(rope(q), rope(k), v)))      over input_norm(x)
    x += post_feedforward_norm(down(gelu_tanh(gate) * up))                 over pre_feedforward_norm(x)
- RMSNorm scales by (1 + weight) (the stored weight is an offset from 1); Gemma 3 also norms each head of q and k
  (`q_norm`, `k_norm`, the same (1 + weight) form) before RoPE.
- The token embedding is multiplied by sqrt(hidden_size) rounded to the checkpoint's dtype (transformers keeps the
  factor as a float32 buffer and casts it to the weights' dtype: 48.0 in bfloat16 where float32 says 47.96...).
- Attention scores are scaled by query_pre_attn_scalar**-0.5, not 1/sqrt(head_dim) (head_dim is not hidden/heads);
  Gemma 2 softcaps them (50 * tanh(s / 50)) and both softcap the final logits (Gemma 2's 30; Gemma 3's off unless
  set). Layers alternate sliding-window and full attention (config.py reads the pattern), and Gemma 3's sliding
  layers rotate with their own base (rope_local_base_freq, 10k) where the full ones use rope_theta (1M).
Decisions, and why:
- A subclass of LlamaDecoder, not a copy: the projections, their fusion (qkv, gate_up), the tied output, q/k norm,
  the paged attention call and the weight checks are the same code; Gemma adds two norms per block, the (1 + w)
  offset (added once at load, so the norm itself is llama's), its embedding scale and its step's order.
- GeGLU uses the tanh approximation (gelu_pytorch_tanh), what every Gemma 2/3 config names.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from serve.backend import cpu_decode
from serve.zoo.decoders.config import DecoderConfig
from serve.zoo.decoders.layers import add_rms_norm, gelu_tanh, rms_norm
from serve.zoo.decoders.llama import LlamaDecoder, _Block
from serve.zoo.decoders.rope import Rope
from serve.zoo.decoders.step import KVCache, StepBatch
from serve.zoo.decoders.weights import Weights

__all__ = ["GemmaDecoder"]

_STORAGE = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


class _GemmaBlock(_Block):
    def __init__(self, c: DecoderConfig, w: Weights, i: int, linear_dtype: str) -> None:
        super().__init__(c, w, i, linear_dtype)
        p, h, one = f"model.layers.{i}.", c.hidden_size, np.float32(1.0)
        if c.model_type != "gemma":  # Gemma 2 and 3 norm both sides of each sub-layer
            self.pre_ff_norm = w.take(p + "pre_feedforward_layernorm.weight", (h,), np.dtype(np.float32)) + one
            self.post_ff_norm = w.take(p + "post_feedforward_layernorm.weight", (h,), np.dtype(np.float32)) + one
        self.input_norm, self.post_norm = self.input_norm + one, self.post_norm + one  # (1 + weight), once
        if c.qk_norm:
            self.q_norm, self.k_norm = self.q_norm + one, self.k_norm + one


class GemmaDecoder(LlamaDecoder):
    """Gemma 2 / Gemma 3 (text) implementing step.py's Decoder protocol."""

    block_type = _GemmaBlock

    def __init__(self, config: DecoderConfig, weights: Weights, linear_dtype: str = "float32") -> None:
        _language_model(weights)
        super().__init__(config, weights, linear_dtype)
        self.norm = self.norm + np.float32(1.0)
        self.local_rope = None if config.local_rope is None else Rope(config.local_rope, config.head_dim)
        storage = _STORAGE.get(config.dtype, np.float32)
        self.embed_scale = np.float32(storage(np.float32(config.hidden_size**0.5)))

    def step(self, batch: StepBatch, cache: KVCache) -> np.ndarray:
        c = self.config
        x = self.embed[batch.input_ids] * self.embed_scale  # (T, hidden)
        full = self.rope.for_step(batch)
        local = full if self.local_rope is None else self.local_rope.for_step(batch)
        for layer, b in enumerate(self.blocks):
            assert isinstance(b, _GemmaBlock)
            cos, sin = full if b.window is None else local
            if c.model_type == "gemma":  # Gemma (1): Llama's pre-norm block (post_norm is the MLP's input norm)
                x = self._attention(b, rms_norm(x, b.input_norm, c.norm_eps), cos, sin, layer, batch, cache, x)
                x = b.down(gelu_and_mul(b.gate_up(rms_norm(x, b.post_norm, c.norm_eps))), residual=x)
                continue
            a = self._attention(b, rms_norm(x, b.input_norm, c.norm_eps), cos, sin, layer, batch, cache)
            x, h = add_rms_norm(x, rms_norm(a, b.post_norm, c.norm_eps), b.pre_ff_norm, c.norm_eps)  # x + post(a)
            m = b.down(gelu_and_mul(b.gate_up(h)))  # h: x's pre-feedforward norm
            x = x + rms_norm(m, b.post_ff_norm, c.norm_eps)
        x = rms_norm(x[batch.logits_indices], self.norm, c.norm_eps)  # (L, hidden)
        logits = self.lm_head(x).astype(np.float32, copy=False)  # (L, vocab)
        if c.final_logit_softcapping is not None:
            cap = np.float32(c.final_logit_softcapping)
            logits = np.tanh(logits / cap) * cap
        return logits


_LANGUAGE_MODEL = (("language_model.model.", "model."), ("model.language_model.", "model."),
                   ("language_model.lm_head.", "lm_head."))  # fmt: skip
_VISION = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.")


def _language_model(weights: Weights) -> None:
    """A Gemma 3 checkpoint with its vision tower (Gemma3ForConditionalGeneration) holds the text model under
    `language_model.model.` (as transformers saves it; `model.language_model.` in its module tree): renamed to the
    text model's names, and the vision tower and projector dropped (serve generates from text)."""
    if not any(name.startswith(("language_model.", "model.language_model.")) for name in weights.arrays):
        return
    for name in list(weights.arrays):
        if name.startswith(_VISION):
            del weights.arrays[name]
            continue
        for old, new in _LANGUAGE_MODEL:
            if name.startswith(old):
                weights.arrays[new + name[len(old) :]] = weights.arrays.pop(name)
                break


def gelu_and_mul(gate_up: np.ndarray) -> np.ndarray:
    """GeGLU: gelu_tanh(gate) * up, from the fused (T, 2 * intermediate) product, gate first."""
    y = cpu_decode.glu(gate_up, "gelu_tanh")  # one native pass; None: no kernel
    if y is not None:
        return y
    half = gate_up.shape[-1] // 2
    return gelu_tanh(gate_up[:, :half]) * gate_up[:, half:]
