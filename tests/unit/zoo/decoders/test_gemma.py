"""Gemma beyond the family parity test (reference.py's gemma2 and gemma3 run it): config.json as older transformers
wrote it (no layer_types, rope_local_base_freq, rope_scaling for the full layers only) read as transformers reads
it, a whole model on such a file, the embedding scale in a bfloat16 checkpoint's dtype, and proof that what the
parity test covers is in play at its sizes (each Gemma feature switched off changes transformers' logits)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from serve.errors import CheckpointError
from serve.zoo.decoders import load_pretrained
from serve.zoo.decoders.config import read_config
from tests.unit.zoo.decoders.reference import make_checkpoint, reference_logits, torch, transformers
from tests.unit.zoo.decoders.test_families import run_and_compare

SMALL = {"vocab_size": 400, "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 128}  # fmt: skip
OLD_GEMMA3 = {**SMALL, "model_type": "gemma3_text", "num_hidden_layers": 4, "sliding_window_pattern": 3,
              "sliding_window": 5, "rope_theta": 500000.0, "rope_local_base_freq": 20.0,
              "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "query_pre_attn_scalar": 16}  # fmt: skip
OLD_GEMMA2 = {**SMALL, "model_type": "gemma2", "num_hidden_layers": 3, "rope_theta": 1234.0,
              "final_logit_softcapping": None}  # fmt: skip


def _rope_of(rope: Any) -> dict[str, Any]:
    out = {"rope_type": rope.rope_type, "rope_theta": rope.theta}
    return out if rope.rope_type == "default" else {**out, "factor": rope.factor}


@pytest.mark.parametrize("config", [OLD_GEMMA3, OLD_GEMMA2], ids=["gemma3", "gemma2"])
def test_older_config_files_read_as_transformers_reads_them(config: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    ref = transformers.AutoConfig.from_pretrained(tmp_path)
    ours = read_config(tmp_path)
    expected = tuple(ref.sliding_window if t == "sliding_attention" else None for t in ref.layer_types)
    assert ours.sliding_windows == expected and len(set(expected)) == 2  # both kinds of layer
    assert ours.head_dim == ref.head_dim and ours.query_pre_attn_scalar == ref.query_pre_attn_scalar
    assert ours.final_logit_softcapping == ref.final_logit_softcapping
    assert ours.rope is not None
    if config["model_type"] == "gemma3_text":
        assert ours.local_rope is not None and ours.attn_logit_softcapping is None  # transformers' Gemma 3 ignores it
        assert _rope_of(ours.rope) == ref.rope_parameters["full_attention"]
        assert _rope_of(ours.local_rope) == ref.rope_parameters["sliding_attention"]
    else:
        assert ours.attn_logit_softcapping == ref.attn_logit_softcapping == 50.0
        assert _rope_of(ours.rope) == {k: ref.rope_parameters[k] for k in ("rope_type", "rope_theta")}


def test_gemma1s_first_files_say_gelu_and_mean_the_tanh_form(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**SMALL, "model_type": "gemma", "num_hidden_layers": 2,
                                                      "hidden_act": "gelu"}))  # fmt: skip
    ref, ours = transformers.AutoConfig.from_pretrained(tmp_path), read_config(tmp_path)
    assert ours.hidden_act == ref.hidden_act == "gelu_pytorch_tanh"
    assert ours.sliding_windows == (None, None) and ours.query_pre_attn_scalar is None  # 1/sqrt(head_dim)


def test_a_model_with_an_older_gemma3_config_matches_transformers(tmp_path: Path) -> None:
    """The legacy file's two RoPE bases and its layer pattern, through a whole model."""
    (tmp_path / "config.json").write_text(json.dumps(OLD_GEMMA3))
    config = transformers.AutoConfig.from_pretrained(tmp_path)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(OLD_GEMMA3))  # the weights beside the old file again
    run_and_compare(model, tmp_path)


def test_the_embedding_scale_is_rounded_to_a_bfloat16_checkpoints_dtype(tmp_path: Path) -> None:
    config = transformers.Gemma2Config(**{**SMALL, "hidden_size": 48, "num_hidden_layers": 1})
    model = transformers.AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    assert read_config(tmp_path).dtype == "bfloat16"
    expected = float(torch.tensor(48**0.5).to(torch.bfloat16))  # what transformers multiplies by: 6.9375
    assert load_pretrained(tmp_path).embed_scale == expected != np.float32(48**0.5)  # type: ignore[attr-defined]


def _without(model: Any, change: str) -> None:
    config = model.config
    if change == "final softcap":
        config.final_logit_softcapping = None
    elif change == "attention softcap":
        for layer in model.model.layers:
            layer.self_attn.attn_logit_softcapping = None
    elif change == "local rope base":  # the sliding layers rotate with the full layers' frequencies
        rotary = model.model.rotary_emb
        rotary.sliding_attention_inv_freq = rotary.full_attention_inv_freq
    elif change == "query_pre_attn_scalar":
        for layer in model.model.layers:
            layer.self_attn.scaling = config.head_dim**-0.5
    elif change == "sliding window":
        config.sliding_window = 10_000


@pytest.mark.parametrize(
    ("name", "change"),
    [("gemma2", "final softcap"), ("gemma2", "attention softcap"), ("gemma2", "query_pre_attn_scalar"),
     ("gemma2", "sliding window"), ("gemma3", "local rope base"), ("gemma3", "final softcap")],
)  # fmt: skip
def test_each_gemma_feature_changes_the_answer_at_these_sizes(name: str, change: str, tmp_path: Path) -> None:
    model = make_checkpoint(name, tmp_path)
    ids = list(range(2, 22))
    before = reference_logits(model, ids)
    _without(model, change)
    assert not np.allclose(before, reference_logits(model, ids), atol=1e-3)


def test_gemma3_with_its_vision_tower_serves_its_text_model(tmp_path: Path) -> None:
    """Gemma3ForConditionalGeneration's folder (model_type gemma3, the text model under language_model., a SigLIP
    tower beside it): the same logits and greedy tokens as transformers' multimodal model on text alone."""
    # final_logit_softcapping stays unset, as in Google's Gemma 3 files: transformers 5's multimodal class ignores it
    text = {**SMALL, "num_hidden_layers": 3, "sliding_window": 5, "sliding_window_pattern": 2,
            "query_pre_attn_scalar": 24, "initializer_range": 0.1}  # fmt: skip
    vision = {"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 1, "num_attention_heads": 2,
              "image_size": 28, "patch_size": 14}  # fmt: skip
    config = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                       image_token_index=397, boi_token_index=395, eoi_token_index=396)  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "gemma3"
    assert read_config(tmp_path).sliding_windows == (5, None, 5)
    run_and_compare(model, tmp_path)


def test_a_gemma3_folder_without_text_config_names_the_key(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3"}))
    with pytest.raises(CheckpointError, match="the key 'text_config' is missing"):
        read_config(tmp_path)
