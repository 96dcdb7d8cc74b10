"""`load_pretrained(folder)`: a Hugging Face model folder as a Decoder, the family chosen by config.json's model_type.

Decisions, and why:
- Dispatch on `model_type`, not `architectures`: it names the family (TinyLlama and SmolLM are "llama"), and
  every transformers version writes it.
- dtype is the products' weight type: "float32", or "bfloat16" (weights rounded to bf16 for the AVX512-BF16
  kernel: half the bytes a decode step streams). Activations, norms, the KV cache and the logits stay float32
  either way, so the engine sizes its cache the same. bfloat16 on a CPU without AVX512-BF16 is refused at load,
  so a model-config asking for it fails at registration, not mid-generation.
- "auto" (vLLM's word) is the checkpoint's own dtype where this CPU runs it: a bfloat16 checkpoint (most of those
  published) gets bfloat16 products on a CPU with AVX512-BF16, anything else float32. So a float32 checkpoint is
  served exactly (logits within 1e-4 of torch) and a bfloat16 one at the speed its author chose.
- quantization "int8" (vLLM's key; its value is ours) makes the products weight-only int8, quantised here at load
  from whatever the checkpoint holds (serve.backend.cpu_int8: per-column scales, fp32 activations): a quarter of
  fp32's bytes per token. It replaces dtype for the products; the rest stays float32, as above. Opt-in, since the
  logits move (about 1% of their range on a trained model) where fp32 keeps torch's numbers.
- `max_model_len` (the engine's bound, when the model-config sets one) reaches the RoPE: longrope takes its short
  factors when no sequence can outgrow the original context (rope.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from serve.backend import cpu_native
from serve.zoo.decoders.config import GEMMA, read_config
from serve.zoo.decoders.gemma import GemmaDecoder
from serve.zoo.decoders.gpt2 import GPT2Decoder
from serve.zoo.decoders.llama import LlamaDecoder
from serve.zoo.decoders.step import Decoder
from serve.zoo.decoders.weights import read_weights

__all__ = ["load_pretrained"]

DTYPES = ("auto", "float32", "bfloat16")
QUANTIZATIONS = (None, "int8")


def load_pretrained(
    folder: str | Path, dtype: str = "float32", quantization: str | None = None, max_model_len: int | None = None
) -> Decoder:
    """The decoder of a Hugging Face folder (config.json + model.safetensors or its sharded index)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype '{dtype}' is not supported for decoders yet; use one of {', '.join(DTYPES)}")
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization '{quantization}' is not supported; use int8 (weight-only) or leave it out")
    path = Path(folder)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: not a directory (expected a Hugging Face model folder)")
    config = read_config(path)
    if max_model_len is not None and config.rope is not None:
        local = config.local_rope and replace(config.local_rope, max_model_len=max_model_len)
        config = replace(config, rope=replace(config.rope, max_model_len=max_model_len), local_rope=local)
    if dtype == "auto":
        dtype = auto_dtype(config.dtype)
    if quantization == "int8":
        dtype = "int8"  # the products' weights (layers.Linear); activations and cache stay float32
    weights = read_weights(path)
    if config.model_type == "gpt2":
        return GPT2Decoder(config, weights, dtype)
    if config.model_type in GEMMA:
        return GemmaDecoder(config, weights, dtype)
    return LlamaDecoder(config, weights, dtype)


def auto_dtype(checkpoint_dtype: str) -> str:
    """The products' dtype for a checkpoint stored in `checkpoint_dtype` (module docstring: "auto")."""
    return "bfloat16" if checkpoint_dtype == "bfloat16" and cpu_native.bf16_available() else "float32"
