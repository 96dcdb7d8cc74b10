"""What a Hugging Face model folder's config.json says about a decoder, read into one typed `DecoderConfig`.

Decisions, and why:
- One config type for every family: the families differ by flags (QKV bias, q/k norm, sliding window, tied
  embeddings, learned positions), not by structure, so the loaders read one shape and the blocks branch on flags.
- RoPE is read as transformers 5 writes it (`rope_parameters`: `rope_type`, `rope_theta`, `factor`, ...) and as
  older folders wrote it (`rope_theta` at the top, `rope_scaling` with `type` or `rope_type`), because the
  checkpoints people serve were saved by many transformers versions.
- A sliding window is per layer: `layer_types` (Qwen2/Qwen3 in transformers 5: "sliding_attention" or
  "full_attention") says which layers use `sliding_window`; without it, Mistral's applies to all layers and
  Qwen's to the layers from `max_window_layers` on when `use_sliding_window` is set (transformers' rule).
- Every problem is a CheckpointError naming the file and the key (the server answers it at registration as the
  archive's fault, a 4xx), never a KeyError from deep inside a loader.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serve.errors import CheckpointError

__all__ = ["DecoderConfig", "RopeConfig", "read_config", "read_json"]

LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3", "phi3")
FAMILIES = ("gpt2", *LLAMA_LIKE)
ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True)
class RopeConfig:
    theta: float = 10000.0
    rope_type: str = "default"  # "default" | "linear" | "llama3"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    partial_rotary_factor: float = 1.0


@dataclass(frozen=True)
class DecoderConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_position_embeddings: int
    norm_eps: float
    tie_word_embeddings: bool
    hidden_act: str = "silu"
    attention_bias: bool = False  # bias on q, k and v (Qwen2's is always on)
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3: RMSNorm over each head of q and k before RoPE
    sliding_windows: tuple[int | None, ...] = ()  # per layer: attend to the last W positions, or None for all
    rope: RopeConfig | None = None  # None: learned absolute positions (GPT-2)
    dtype: str = "float32"  # the checkpoint's own dtype (config's `dtype`, or `torch_dtype` before transformers 5)


def read_json(path: Path, required: bool = True) -> dict[str, Any]:
    """A JSON object from `path`; {} when it is absent and not required."""
    if not path.is_file():
        if required:
            raise CheckpointError(f"{path.name}: not found in {path.parent} (a Hugging Face model folder needs it)")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path.name}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path.name}: expected a JSON object, got {type(data).__name__}")
    return data


class _Reader:
    """Typed access to one JSON object, every error naming the file and the key."""

    def __init__(self, data: dict[str, Any], file: str) -> None:
        self.data, self.file = data, file

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in self.data or (self.data[key] is None and default is not ...):
            if default is ...:
                raise CheckpointError(f"{self.file}: the key '{key}' is missing")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise CheckpointError(f"{self.file}: '{key}' must be {names}, got {value!r}")
        return value

    def positive(self, key: str, default: Any = ...) -> Any:
        value = self.get(key, int, default)
        if value is None and default is None:
            return None
        if value <= 0:
            raise CheckpointError(f"{self.file}: '{key}' must be a positive integer, got {value!r}")
        return int(value)


def read_config(folder: Path) -> DecoderConfig:
    """The DecoderConfig of a Hugging Face folder's config.json (model_type one of FAMILIES)."""
    r = _Reader(read_json(folder / "config.json"), "config.json")
    model_type = r.get("model_type", str)
    if model_type not in FAMILIES:
        raise CheckpointError(
            f"config.json: model_type '{model_type}' is not a decoder family serve implements "
            f"(one of {', '.join(FAMILIES)})"
        )
    dtype = r.get("dtype", str, None) or r.get("torch_dtype", str, "float32")
    return _gpt2(r, dtype) if model_type == "gpt2" else _llama_like(r, model_type, dtype)


def _gpt2(r: _Reader, dtype: str) -> DecoderConfig:
    hidden, heads = r.positive("n_embd"), r.positive("n_head")
    if hidden % heads:
        raise CheckpointError(f"config.json: n_embd ({hidden}) must be a multiple of n_head ({heads})")
    if r.get("scale_attn_by_inverse_layer_idx", bool, False) or r.get("add_cross_attention", bool, False):
        raise CheckpointError("config.json: scale_attn_by_inverse_layer_idx / add_cross_attention are not supported")
    act = r.get("activation_function", str, "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise CheckpointError(f"config.json: activation_function '{act}' is not supported (gelu_new)")
    layers = r.positive("n_layer")
    return DecoderConfig(
        model_type="gpt2", vocab_size=r.positive("vocab_size"), hidden_size=hidden, num_layers=layers,
        num_heads=heads, num_kv_heads=heads, head_dim=hidden // heads,
        intermediate_size=r.positive("n_inner", 4 * hidden), max_position_embeddings=r.positive("n_positions"),
        norm_eps=r.get("layer_norm_epsilon", float, 1e-5), tie_word_embeddings=r.get("tie_word_embeddings", bool, True),
        hidden_act=act, attention_bias=True, mlp_bias=True, sliding_windows=(None,) * layers, dtype=dtype,
    )  # fmt: skip


def _llama_like(r: _Reader, model_type: str, dtype: str) -> DecoderConfig:
    hidden, heads = r.positive("hidden_size"), r.positive("num_attention_heads")
    kv_heads = r.positive("num_key_value_heads", heads)
    if heads % kv_heads:
        raise CheckpointError(
            f"config.json: num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})"
        )
    head_dim = r.positive("head_dim", None) or hidden // heads
    act = r.get("hidden_act", str, "silu")
    if act != "silu":
        raise CheckpointError(f"config.json: hidden_act '{act}' is not supported (silu)")
    layers = r.positive("num_hidden_layers")
    return DecoderConfig(
        model_type=model_type, vocab_size=r.positive("vocab_size"), hidden_size=hidden, num_layers=layers,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=r.positive("intermediate_size"),
        max_position_embeddings=r.positive("max_position_embeddings"),
        norm_eps=r.get("rms_norm_eps", float, 1e-6), tie_word_embeddings=r.get("tie_word_embeddings", bool, False),
        hidden_act=act, attention_bias=model_type == "qwen2" or r.get("attention_bias", bool, False),
        mlp_bias=r.get("mlp_bias", bool, False), qk_norm=model_type == "qwen3",
        sliding_windows=_sliding_windows(r, layers), rope=_rope(r, head_dim), dtype=dtype,
    )  # fmt: skip


def _sliding_windows(r: _Reader, layers: int) -> tuple[int | None, ...]:
    window = r.positive("sliding_window", None)
    if r.data.get("use_sliding_window") is False:  # Qwen2/Qwen3: the window is off unless this is set
        window = None
    types = r.get("layer_types", list, None)
    if types is None:
        if r.data.get("model_type") in ("qwen2", "qwen3"):  # transformers 4's files: layers from max_window_layers on
            first = r.get("max_window_layers", int, 28)
            return tuple(window if i >= first else None for i in range(layers))
        return (window,) * layers
    if len(types) != layers or any(t not in ("full_attention", "sliding_attention") for t in types):
        raise CheckpointError(
            f"config.json: 'layer_types' must list {layers} entries of 'full_attention' or 'sliding_attention'"
        )
    if "sliding_attention" in types and window is None and "use_sliding_window" not in r.data:
        raise CheckpointError("config.json: 'layer_types' names sliding_attention layers but 'sliding_window' is unset")
    return tuple(window if t == "sliding_attention" else None for t in types)


def _rope(r: _Reader, head_dim: int) -> RopeConfig:
    params = r.get("rope_parameters", dict, None) or r.get("rope_scaling", dict, None) or {}
    p = _Reader(params, "config.json rope_parameters")
    rope_type = p.get("rope_type", str, None) or p.get("type", str, "default")
    if rope_type not in ROPE_TYPES:
        raise CheckpointError(f"config.json: rope_type '{rope_type}' is not supported (one of {', '.join(ROPE_TYPES)})")
    theta = p.get("rope_theta", float, None) or r.get("rope_theta", float, 10000.0)
    partial = p.get("partial_rotary_factor", float, None) or r.get("partial_rotary_factor", float, 1.0)
    if int(head_dim * partial) % 2:
        raise CheckpointError(f"config.json: partial_rotary_factor {partial} leaves an odd rotary dimension")
    factor = p.get("factor", float, 1.0 if rope_type == "default" else ...)
    if rope_type == "llama3":
        return RopeConfig(
            theta, rope_type, factor, p.get("low_freq_factor", float), p.get("high_freq_factor", float),
            p.get("original_max_position_embeddings", int, r.get("max_position_embeddings", int)), partial,
        )  # fmt: skip
    return RopeConfig(theta, rope_type, factor, partial_rotary_factor=partial)
