"""config.json and safetensors problems are CheckpointErrors naming the file and the key (no torch needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from serve.errors import CheckpointError
from serve.zoo.decoders import load_pretrained
from serve.zoo.decoders.config import read_config

LLAMA = {"model_type": "llama", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 1,
         "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32}  # fmt: skip


def write(folder: Path, config: dict[str, Any], tensors: dict[str, np.ndarray] | None = None) -> Path:
    (folder / "config.json").write_text(json.dumps(config))
    if tensors is not None:
        save_file(tensors, str(folder / "model.safetensors"))
    return folder


def llama_tensors() -> dict[str, np.ndarray]:
    shapes = {"model.embed_tokens.weight": (16, 8), "model.norm.weight": (8,), "lm_head.weight": (16, 8),
              "model.layers.0.input_layernorm.weight": (8,), "model.layers.0.post_attention_layernorm.weight": (8,),
              "model.layers.0.self_attn.q_proj.weight": (8, 8), "model.layers.0.self_attn.k_proj.weight": (4, 8),
              "model.layers.0.self_attn.v_proj.weight": (4, 8), "model.layers.0.self_attn.o_proj.weight": (8, 8),
              "model.layers.0.mlp.gate_proj.weight": (12, 8), "model.layers.0.mlp.up_proj.weight": (12, 8),
              "model.layers.0.mlp.down_proj.weight": (8, 12)}  # fmt: skip
    return {k: np.ones(s, np.float32) for k, s in shapes.items()}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_size": None}, "config.json: the key 'hidden_size' is missing"),
        ({"model_type": "bloom"}, "model_type 'bloom' is not a decoder family"),
        ({"num_key_value_heads": 3}, "must be a multiple of num_key_value_heads"),
        ({"vocab_size": "16"}, "'vocab_size' must be int"),
        ({"rope_scaling": {"type": "su", "factor": 2.0}}, "rope_type 'su' is not supported"),
        ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0}}, "'low_freq_factor' is missing"),
        ({"layer_types": ["sliding_attention"]}, "'sliding_window' is unset"),
    ],
)
def test_config_problems_name_the_key(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    config = {k: v for k, v in {**LLAMA, **change}.items() if v is not None}
    with pytest.raises(CheckpointError, match=message):
        read_config(write(tmp_path, config))


def test_transformers_4_rope_fields_are_read(tmp_path: Path) -> None:
    old = {**LLAMA, "rope_theta": 500000.0, "rope_scaling": {"type": "linear", "factor": 2.0}}
    rope = read_config(write(tmp_path, old)).rope
    assert rope is not None and (rope.rope_type, rope.theta, rope.factor) == ("linear", 500000.0, 2.0)


def test_weight_problems_name_the_tensor(tmp_path: Path) -> None:
    tensors = llama_tensors()
    assert load_pretrained(write(tmp_path, LLAMA, tensors)).spec.num_kv_heads == 1
    del tensors["model.norm.weight"]
    with pytest.raises(CheckpointError, match=r"model\.safetensors: the tensor 'model\.norm\.weight' is missing"):
        load_pretrained(write(tmp_path, LLAMA, tensors))
    tensors = {**llama_tensors(), "model.layers.0.self_attn.k_proj.weight": np.ones((8, 8), np.float32)}
    with pytest.raises(CheckpointError, match=r"'model.layers.0.self_attn.k_proj.weight' has shape \(8, 8\)"):
        load_pretrained(write(tmp_path, LLAMA, tensors))
    tensors = {**llama_tensors(), "model.layers.1.mlp.up_proj.weight": np.ones((12, 8), np.float32)}
    with pytest.raises(CheckpointError, match="1 tensors the model does not use"):
        load_pretrained(write(tmp_path, LLAMA, tensors))
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"no model\.safetensors or model\.safetensors\.index\.json"):
        load_pretrained(tmp_path)
    with pytest.raises(ValueError, match="dtype 'int8' is not supported"):
        load_pretrained(tmp_path, dtype="int8")


@pytest.mark.parametrize(
    ("extra", "windows"),
    [
        ({"model_type": "mistral", "sliding_window": 4}, (4, 4, 4)),
        ({"model_type": "qwen2", "sliding_window": 4, "use_sliding_window": False}, (None, None, None)),
        (
            {"model_type": "qwen2", "sliding_window": 4, "use_sliding_window": True, "max_window_layers": 1},
            (None, 4, 4),
        ),
        (
            {
                "model_type": "qwen3",
                "sliding_window": 4,
                "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
            },
            (4, None, 4),
        ),
    ],
)
def test_sliding_windows_per_layer(tmp_path: Path, extra: dict[str, Any], windows: tuple[int | None, ...]) -> None:
    config = read_config(write(tmp_path, {**LLAMA, "num_hidden_layers": 3, **extra}))
    assert config.sliding_windows == windows
