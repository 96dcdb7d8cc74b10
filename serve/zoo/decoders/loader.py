"""`load_pretrained(folder)`: a Hugging Face model folder as a Decoder, the family chosen by config.json's model_type.

Decisions, and why:
- Dispatch on `model_type`, not `architectures`: it names the family (TinyLlama and SmolLM are "llama"), and
  every transformers version writes it.
- dtype is the products' weight type: "float32", or "bfloat16" (weights rounded to bf16 for the AVX512-BF16
  kernel: half the bytes a decode step streams). Activations, norms, the KV cache and the logits stay float32
  either way, so the engine sizes its cache the same. bfloat16 on a CPU without AVX512-BF16 is refused at load,
  so a model-config asking for it fails at registration, not mid-generation.
"""

from __future__ import annotations

from pathlib import Path

from serve.zoo.decoders.config import read_config
from serve.zoo.decoders.gpt2 import GPT2Decoder
from serve.zoo.decoders.llama import LlamaDecoder
from serve.zoo.decoders.step import Decoder
from serve.zoo.decoders.weights import read_weights

__all__ = ["load_pretrained"]

DTYPES = ("float32", "bfloat16")


def load_pretrained(folder: str | Path, dtype: str = "float32") -> Decoder:
    """The decoder of a Hugging Face folder (config.json + model.safetensors or its sharded index)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype '{dtype}' is not supported for decoders yet; use one of {', '.join(DTYPES)}")
    path = Path(folder)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: not a directory (expected a Hugging Face model folder)")
    config = read_config(path)
    weights = read_weights(path)
    if config.model_type == "gpt2":
        return GPT2Decoder(config, weights, dtype)
    return LlamaDecoder(config, weights, dtype)
