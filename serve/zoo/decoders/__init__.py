"""Decoder families of Hugging Face checkpoints, written for the generative engine (step.py: the contract).

config.py reads config.json, weights.py the safetensors (single or sharded), loader.py picks the family:
gpt2.py (GPT-2), llama.py (Llama, Mistral, Qwen2, Qwen3, Phi-3: one block with flags) or gemma.py (Gemma, Gemma 2
and Gemma 3's text model: llama.py's decoder with Gemma's block); layers.py, rope.py and
attention.py (over the paged KV cache) are their shared pieces. tokenizer.py and chat_template.py read the
tokenizer and render chat templates as transformers does; generation_config.py reads the sampling defaults.
"""

from serve.zoo.decoders.loader import load_pretrained
from serve.zoo.decoders.step import Decoder, DecoderSpec, KVCache, StepBatch

__all__ = ["Decoder", "DecoderSpec", "KVCache", "StepBatch", "load_pretrained"]
