"""The transformers + torch reference for the decoder-family tests: tiny seeded checkpoints written by
`save_pretrained`, and an engine-like driver that runs a Decoder over a paged KV cache.

transformers imports torchvision when it is installed; the CUDA torchvision wheel of our machines fails at import
on a CPU torch, so its meta registrations module is stubbed first (tests/torchvision_reference.py explains it).
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from serve.zoo.decoders.step import Decoder, KVCache, StepBatch

torch = pytest.importorskip("torch")
sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
transformers = pytest.importorskip("transformers")

COMMON = dict(
    vocab_size=400, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.1, bos_token_id=1, eos_token_id=399,
    pad_token_id=0,
)  # fmt: skip

CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "gpt2": ("GPT2Config", dict(vocab_size=400, n_embd=64, n_layer=2, n_head=4, n_positions=128,
                                initializer_range=0.1, bos_token_id=1, eos_token_id=399)),
    "llama": ("LlamaConfig", dict(COMMON, attention_bias=True, mlp_bias=True)),
    "llama3-rope": ("LlamaConfig", dict(COMMON, rope_parameters=dict(
        rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=16))),
    "llama-linear-rope": ("LlamaConfig", dict(COMMON, tie_word_embeddings=True, rope_parameters=dict(
        rope_type="linear", rope_theta=10000.0, factor=4.0))),
    "mistral": ("MistralConfig", dict(COMMON, sliding_window=5)),
    "qwen2": ("Qwen2Config", dict(COMMON)),
    "qwen2-sliding": ("Qwen2Config", dict(COMMON, use_sliding_window=True, sliding_window=6, max_window_layers=1)),
    "qwen3": ("Qwen3Config", dict(COMMON, head_dim=32)),
    "phi3": ("Phi3Config", dict(COMMON, rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                             partial_rotary_factor=0.5))),
    # RoPE scaling (rope_test.py checks each variant's frequencies; these, whole models on them)
    "llama-yarn": ("LlamaConfig", dict(COMMON, max_position_embeddings=64, rope_parameters=dict(
        rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=16, beta_fast=8.0,
        beta_slow=2.0))),
    "qwen2-yarn": ("Qwen2Config", dict(COMMON, rope_parameters=dict(  # DeepSeek's mscale ratio
        rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=32, mscale=2.0,
        mscale_all_dim=1.0))),
    "phi3-longrope": ("Phi3Config", dict(COMMON, original_max_position_embeddings=4, rope_parameters=dict(
        rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.5, short_factor=[1.0, 1.5, 2.0, 4.0],
        long_factor=[2.0, 3.0, 5.0, 9.0]))),  # every prompt here is longer than 4 tokens: the long factors
    # Gemma: head_dim 32 is not hidden/heads; the softcaps small enough to bite at these scales
    "gemma": ("GemmaConfig", dict(COMMON, head_dim=32)),
    "gemma2": ("Gemma2Config", dict(COMMON, num_hidden_layers=3, head_dim=32, query_pre_attn_scalar=24,
                                    sliding_window=5, attn_logit_softcapping=2.0, final_logit_softcapping=3.0)),
    "gemma3": ("Gemma3TextConfig", dict(COMMON, num_hidden_layers=3, head_dim=32, query_pre_attn_scalar=24,
        sliding_window=5, final_logit_softcapping=3.0,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"], rope_parameters=dict(
            sliding_attention=dict(rope_type="default", rope_theta=100.0),
            full_attention=dict(rope_type="linear", rope_theta=1e6, factor=2.0)))),
}  # fmt: skip


def make_checkpoint(name: str, folder: Path, seed: int = 0, **save: Any) -> Any:
    """A seeded tiny model of family `name` saved to `folder` as safetensors; returns the torch model (eval)."""
    cls, kwargs = CONFIGS[name]
    config = getattr(transformers, cls)(**kwargs)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():  # norms start at 1 and biases at 0: perturb them so a misplaced one shows
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(folder, safe_serialization=True, **save)
    return model


def reference_logits(model: Any, ids: list[int]) -> np.ndarray:
    """transformers' logits of every position of `ids`, (len, vocab)."""
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def reference_generate(model: Any, ids: list[int], new_tokens: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    return out[0, len(ids) :].tolist()


@dataclass
class Sequence:
    tokens: list[int]  # prompt, then generated
    blocks: list[int]
    cached: int = 0  # tokens whose K/V are in the cache
    logits: list[np.ndarray] = field(default_factory=list)  # the returned rows, in step order


class PagedRunner:
    """What the engine does around `decoder.step`: block tables from a shuffled pool, ragged steps."""

    def __init__(self, decoder: Decoder, block_size: int = 4, num_blocks: int = 64, seed: int = 0) -> None:
        self.decoder, self.block_size = decoder, block_size
        self.cache = KVCache(decoder.spec, num_blocks, block_size)
        self.free = [int(b) for b in np.random.default_rng(seed).permutation(num_blocks)]  # out of order

    def add(self, prompt: list[int]) -> Sequence:
        return Sequence(list(prompt), [])

    def step(self, work: list[tuple[Sequence, int]], all_logits: bool = False) -> np.ndarray:
        """One step: each (sequence, n) feeds its next n uncached tokens; returns the logits rows."""
        ids, pos, starts, slots, lasts = [], [], [0], [], []
        for seq, n in work:
            new = range(seq.cached, seq.cached + n)
            while len(seq.blocks) * self.block_size < seq.cached + n:
                seq.blocks.append(self.free.pop())
            ids += [seq.tokens[p] for p in new]
            pos += list(new)
            slots += [seq.blocks[p // self.block_size] * self.block_size + p % self.block_size for p in new]
            starts.append(len(ids))
            lasts.append(len(ids) - 1)
            seq.cached += n
        width = max(len(s.blocks) for s, _ in work)
        tables = np.full((len(work), width + 1), -1, np.int32)  # one unused column, as the engine may pass
        for i, (seq, _) in enumerate(work):
            tables[i, : len(seq.blocks)] = seq.blocks
        batch = StepBatch(
            input_ids=np.array(ids, np.int64), positions=np.array(pos, np.int64),
            query_starts=np.array(starts, np.int64), context_lens=np.array([s.cached for s, _ in work], np.int64),
            block_tables=tables, slot_mapping=np.array(slots, np.int64),
            logits_indices=np.arange(len(ids)) if all_logits else np.array(lasts, np.int64),
        )  # fmt: skip
        return self.decoder.step(batch, self.cache)


def assert_close(ours: np.ndarray, ref: np.ndarray, rtol: float = 1e-4) -> None:
    """Within rtol of the reference, relative to the reference's largest logit."""
    assert ours.shape == ref.shape and ours.dtype == np.float32
    np.testing.assert_allclose(ours, ref, rtol=rtol, atol=rtol * float(np.abs(ref).max()))
