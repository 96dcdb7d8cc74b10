"""`load_pretrained(folder)`: a Hugging Face model folder as a Decoder, the family chosen by config.json's model_type.

Decisions, and why:
- Dispatch on `model_type`, not `architectures`: it names the family (TinyLlama and SmolLM are "llama"), and
  every transformers version writes it.
- dtype is the activation (and KV cache) type. "float32" is the one implemented; "bfloat16" (weights in bf16 for
  AVX512-BF16/AMX products, activations float32) is the planned next step and is refused with that said, so a
  model-config asking for it fails at registration, not mid-generation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from serve.zoo.decoders.config import read_config
from serve.zoo.decoders.gpt2 import GPT2Decoder
from serve.zoo.decoders.llama import LlamaDecoder
from serve.zoo.decoders.step import Decoder
from serve.zoo.decoders.weights import read_weights

__all__ = ["load_pretrained"]

DTYPES = {"float32": np.dtype(np.float32)}


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
        return GPT2Decoder(config, weights, DTYPES[dtype])
    return LlamaDecoder(config, weights, DTYPES[dtype])
