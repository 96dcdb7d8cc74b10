"""RoPE scaling against transformers: each variant's cos and sin (its frequencies, attention factor and, for dynamic,
the growth with the sequence's length; for longrope, the short or long factors) against the model's own rotary
module on the same config.json; then whole models against `generate`'s per-step logits, which is what a KV cache
sees: dynamic's frequencies change mid-generation (keys keep the rotation of the step that made them), longrope's
short factors under a max_model_len within the original context and long ones beyond it. (The yarn and longrope
models of CONFIGS run the family parity test.)"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from serve.zoo.decoders import load_pretrained
from serve.zoo.decoders.config import read_config
from serve.zoo.decoders.rope import Rope
from tests.unit.zoo.decoders.reference import COMMON, PagedRunner, assert_close, torch, transformers

LLAMA = dict(COMMON, max_position_embeddings=32)
LONGROPE = dict(rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.5,
                short_factor=[1.0, 1.5, 2.0, 4.0], long_factor=[2.0, 3.0, 5.0, 9.0])  # fmt: skip

CASES: list[tuple[str, str, dict[str, Any], list[int]]] = [
    ("linear", "LlamaConfig", dict(LLAMA, rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=4.0)),
     [40]),
    ("llama3", "LlamaConfig", dict(LLAMA, rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
     low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8)), [40]),
    ("dynamic", "LlamaConfig", dict(LLAMA, rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0)),
     [20, 32, 33, 50]),
    ("yarn", "LlamaConfig", dict(LLAMA, max_position_embeddings=64, rope_parameters=dict(
     rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=16)), [40]),
    ("yarn-untruncated", "Qwen2Config", dict(LLAMA, rope_parameters=dict(rope_type="yarn", rope_theta=10000.0,
     factor=2.0, original_max_position_embeddings=16, beta_fast=16.0, beta_slow=0.5, truncate=False)), [40]),
    ("yarn-attention-factor", "Qwen2Config", dict(LLAMA, rope_parameters=dict(rope_type="yarn", rope_theta=10000.0,
     factor=2.0, original_max_position_embeddings=16, attention_factor=0.8)), [40]),
    ("yarn-without-factor", "LlamaConfig", dict(LLAMA, rope_parameters=dict(rope_type="yarn", factor=None,
     rope_theta=10000.0, original_max_position_embeddings=8)), [40]),  # factor: max_position_embeddings / 8
    ("longrope", "Phi3Config", dict(LLAMA, max_position_embeddings=128, original_max_position_embeddings=16,
     rope_parameters=LONGROPE), [10, 16, 17, 40]),
    ("longrope-su", "phi3", dict(LLAMA, original_max_position_embeddings=16, rope_theta=10000.0,  # as Phi-3's
     partial_rotary_factor=0.5, rope_scaling=dict(type="su", short_factor=LONGROPE["short_factor"],  # first files
     long_factor=LONGROPE["long_factor"], original_max_position_embeddings=16)), [10, 40]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rope_parameters", "context"),
    [
        ({"rope_type": "default", "rope_theta": 1e4}, 32),
        ({"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0}, 128),
        ({"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}, 64),
        ({"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 16}, 64),
        ({"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8}, 32),
    ],
)  # fmt: skip
def test_the_engine_may_run_sequences_as_long_as_the_scaling_reaches(
    rope_parameters: dict[str, Any], context: int, tmp_path: Path
) -> None:
    """vLLM's derivation of the longest sequence (its max_model_len bound) from max_position_embeddings (32 here):
    linear and dynamic stretch it by their factor, yarn stretches the original context; llama3's is already long."""
    hf_config(tmp_path, "LlamaConfig", dict(LLAMA, rope_parameters=rope_parameters))
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(tmp_path))
    model.save_pretrained(tmp_path)
    assert load_pretrained(tmp_path).spec.max_position_embeddings == context


def hf_rotary(config: Any) -> Any:
    family = config.model_type
    module = getattr(transformers.models, family)
    cls = getattr(getattr(module, f"modeling_{family}"), f"{type(config).__name__[: -len('Config')]}RotaryEmbedding")
    return cls(config)


@pytest.mark.parametrize(("name", "cls", "kwargs", "lengths"), CASES, ids=[c[0] for c in CASES])
def test_cos_and_sin_match_transformers(name: str, cls: str, kwargs: dict[str, Any], lengths: list[int],
                                        tmp_path: Path) -> None:  # fmt: skip
    config = hf_config(tmp_path, cls, kwargs)
    c = read_config(tmp_path)
    assert c.rope is not None and c.rope.rope_type == name.split("-")[0]
    for length in lengths:
        # longrope's factors are chosen by the engine's bound (rope.py); transformers' by the length: the same
        # choice when the bound is the length
        ours = Rope(replace(c.rope, max_model_len=length), c.head_dim)
        positions = np.arange(length)
        cos, sin = ours.cos_sin(positions, np.full(length, length))
        with torch.no_grad():  # a fresh module per length: dynamic's frequencies are state in transformers
            ref_cos, ref_sin = hf_rotary(config)(torch.zeros(1), torch.arange(length)[None])
        half = ours.rotary_dim // 2
        np.testing.assert_allclose(cos[:, 0], ref_cos[0, :, :half].numpy(), rtol=0, atol=2e-6, err_msg=f"{length}")
        np.testing.assert_allclose(sin[:, 0], ref_sin[0, :, :half].numpy(), rtol=0, atol=2e-6, err_msg=f"{length}")


def test_the_scaled_variants_differ_from_the_default(tmp_path: Path) -> None:
    """The cases above are tests of the variants only if each changes cos/sin at the lengths they use."""
    hf_config(tmp_path / "default", "LlamaConfig", LLAMA)
    base = Rope(read_config(tmp_path / "default").rope, 16)  # type: ignore[arg-type]
    for name, cls, kwargs, lengths in CASES:
        hf_config(tmp_path / name, cls, kwargs)
        c = read_config(tmp_path / name)
        rope = Rope(c.rope, c.head_dim)  # type: ignore[arg-type]
        length = lengths[-1]
        cos = rope.cos_sin(np.arange(length), np.full(length, length))[0]
        ref = base.cos_sin(np.arange(length))[0][..., : rope.rotary_dim // 2]
        assert not np.allclose(cos, ref, atol=1e-3), name


def hf_config(folder: Path, cls: str, kwargs: dict[str, Any]) -> Any:
    """transformers' config of `cls` saved in `folder`; a lower-case `cls` is a model_type whose config.json is
    written as given (an old file's keys) and read back by AutoConfig, as from_pretrained reads it."""
    if cls.islower():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps({"model_type": cls, **kwargs}))
        return transformers.AutoConfig.from_pretrained(folder)
    config = getattr(transformers, cls)(**copy.deepcopy(kwargs))
    config.save_pretrained(folder)
    return config


def generate_reference(folder: Path, prompt: list[int], new_tokens: int) -> tuple[list[int], list[np.ndarray]]:
    """transformers' greedy tokens and each step's logits, from a freshly loaded model (dynamic RoPE keeps state)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True)  # fmt: skip
    return out.sequences[0, len(prompt) :].tolist(), [row[0].float().numpy() for row in out.logits]


SCALED_MODELS = {  # name: (config, kwargs, prompt lengths, new tokens, max_model_len)
    # max_position_embeddings 16: the 7-token prompt crosses it while decoding, the 20-token one starts beyond it
    "dynamic": ("LlamaConfig", dict(COMMON, max_position_embeddings=16, rope_parameters=dict(
        rope_type="dynamic", rope_theta=10000.0, factor=2.0)), (7, 20), 10, None),
    # original_max_position_embeddings 12: under max_model_len 12 the short factors (a 5-token prompt and 7 more),
    # without it the long ones (prompts of 15 and 20 tokens, beyond 12 from the start), as transformers picks them
    "longrope-short": ("Phi3Config", dict(COMMON, original_max_position_embeddings=12, rope_parameters=LONGROPE),
                       (5,), 8, 12),
    "longrope-long": ("Phi3Config", dict(COMMON, original_max_position_embeddings=12, rope_parameters=LONGROPE),
                      (15, 20), 8, None),
}  # fmt: skip


@pytest.mark.parametrize("name", list(SCALED_MODELS))
def test_length_dependent_rope_matches_generate_step_by_step(name: str, tmp_path: Path) -> None:
    cls, kwargs, lengths, new_tokens, max_model_len = SCALED_MODELS[name]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, cls)(**copy.deepcopy(kwargs)))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(tmp_path)
    runner = PagedRunner(load_pretrained(tmp_path, max_model_len=max_model_len))
    rng = np.random.default_rng(2)
    prompts = [rng.integers(2, 398, n).tolist() for n in lengths]
    references = [generate_reference(tmp_path, prompt, new_tokens) for prompt in prompts]
    seqs = [runner.add(prompt) for prompt in prompts]
    work = [(seq, len(seq.tokens)) for seq in seqs]  # both prompts whole in the first step, as generate prefills
    for i in range(new_tokens):
        logits = runner.step(work)
        for row, seq, (_, ref_logits) in zip(logits, seqs, references, strict=True):
            if i < len(ref_logits):
                assert_close(row, ref_logits[i])
            seq.tokens.append(int(row.argmax()))
        work = [(seq, 1) for seq in seqs]
    for seq, prompt, (tokens, _) in zip(seqs, prompts, references, strict=True):
        assert seq.tokens[len(prompt) : len(prompt) + len(tokens)] == tokens
