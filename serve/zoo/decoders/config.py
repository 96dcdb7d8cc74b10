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
- RoPE scaling types are transformers' (modeling_rope_utils): linear, dynamic (NTK), yarn, longrope, llama3; an
  `original_max_position_embeddings` at the top of config.json wins over the one in the RoPE parameters (Phi-3
  writes it there, and transformers gives it priority), and Phi-3's old "su"/"yarn" names mean longrope.
- Gemma 3 with its vision tower (model_type gemma3) is read from its `text_config`: serve generates text only.
- Gemma (1), Gemma 2 and Gemma 3 (text) read into the same type: (1 + weight) norms, GeGLU and pre/post norms are the
  family's structure (gemma.py); what varies by checkpoint is read here: query_pre_attn_scalar, the softcaps, the
  sliding/full layer pattern, and Gemma 3's second RoPE (`local_rope`, rope_local_base_freq) for sliding layers.
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
GEMMA = ("gemma", "gemma2", "gemma3_text")
FAMILIES = ("gpt2", *LLAMA_LIKE, *GEMMA)
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3")


@dataclass(frozen=True)
class RopeConfig:
    theta: float = 10000.0
    rope_type: str = "default"  # one of ROPE_TYPES
    factor: float = 1.0
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    original_max_position_embeddings: int = 8192  # llama3, yarn, longrope: the pretraining context
    partial_rotary_factor: float = 1.0
    max_position_embeddings: int = 0  # config.json's: dynamic's threshold, yarn's and longrope's default factor
    attention_factor: float | None = None  # yarn, longrope: cos and sin scaled by it (None: from the factor)
    beta_fast: float = 32.0  # yarn's ramp bounds, in rotations
    beta_slow: float = 1.0
    mscale: float | None = None  # yarn (DeepSeek): the attention factor's ratio
    mscale_all_dim: float | None = None
    truncate: bool = True  # yarn: the ramp bounds rounded outwards to whole dims
    short_factor: tuple[float, ...] = ()  # longrope: per frequency, up to original_max_position_embeddings
    long_factor: tuple[float, ...] = ()  # longrope: beyond it
    max_model_len: int | None = None  # the engine's bound on a sequence, when given at load (longrope's choice)


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
    query_pre_attn_scalar: float | None = None  # Gemma: attention scale query_pre_attn_scalar**-0.5 (None: head_dim)
    attn_logit_softcapping: float | None = None  # Gemma 2: scores = cap * tanh(scores / cap)
    final_logit_softcapping: float | None = None  # Gemma 2/3: logits = cap * tanh(logits / cap)
    local_rope: RopeConfig | None = None  # Gemma 3: the sliding layers' RoPE (rope_local_base_freq)


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
    if model_type == "gemma3":  # with its vision tower: serve runs the text model (gemma.py drops the tower)
        text = r.get("text_config", dict)
        merged = {**text, "model_type": "gemma3_text"}
        if "tie_word_embeddings" in r.data:  # transformers ties the output to the text embedding by the outer flag
            merged["tie_word_embeddings"] = r.data["tie_word_embeddings"]
        dtype = text.get("dtype") or r.get("dtype", str, None) or r.get("torch_dtype", str, "float32")
        return _gemma(_Reader(merged, "config.json text_config"), "gemma3_text", dtype)
    if model_type not in FAMILIES:
        raise CheckpointError(
            f"config.json: model_type '{model_type}' is not a decoder family serve implements "
            f"(one of {', '.join(FAMILIES)})"
        )
    dtype = r.get("dtype", str, None) or r.get("torch_dtype", str, "float32")
    if model_type in GEMMA:
        return _gemma(r, model_type, dtype)
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


def _rope(r: _Reader, head_dim: int, params: dict[str, Any] | None = None, theta: float = 10000.0) -> RopeConfig:
    """The RoPE of `params` (default: config.json's rope_parameters, or rope_scaling before transformers 5)."""
    if params is None:
        params = r.get("rope_parameters", dict, None) or r.get("rope_scaling", dict, None) or {}
    p = _Reader(params, "config.json rope_parameters")
    rope_type = p.get("rope_type", str, None) or p.get("type", str, "default")
    if r.data.get("model_type") == "phi3" and rope_type in ("su", "yarn"):
        rope_type = "longrope"  # Phi-3's names for it before transformers 4.44, as transformers reads them
    if rope_type not in ROPE_TYPES:
        raise CheckpointError(f"config.json: rope_type '{rope_type}' is not supported (one of {', '.join(ROPE_TYPES)})")
    theta = p.get("rope_theta", float, None) or r.get("rope_theta", float, theta)
    partial = p.get("partial_rotary_factor", float, None) or r.get("partial_rotary_factor", float, 1.0)
    rotary_dim = int(head_dim * partial)
    if rotary_dim % 2:
        raise CheckpointError(f"config.json: partial_rotary_factor {partial} leaves an odd rotary dimension")
    max_pos = r.positive("max_position_embeddings")
    original = r.positive("original_max_position_embeddings", None) or p.positive(
        "original_max_position_embeddings", max_pos
    )
    factor = p.get("factor", float, 1.0 if rope_type in ("default", "yarn", "longrope") else ...)
    if rope_type in ("yarn", "longrope") and params.get("factor") is None:
        factor = max_pos / original  # transformers: the ratio of the two contexts when no factor is given
    common = dict(theta=theta, rope_type=rope_type, factor=factor, partial_rotary_factor=partial,
                  original_max_position_embeddings=original, max_position_embeddings=max_pos)  # fmt: skip
    if rope_type == "llama3":
        return RopeConfig(
            **common, low_freq_factor=p.get("low_freq_factor", float), high_freq_factor=p.get("high_freq_factor", float)
        )
    if rope_type == "yarn":
        return RopeConfig(
            **common, attention_factor=p.get("attention_factor", float, None),
            beta_fast=p.get("beta_fast", float, None) or 32.0, beta_slow=p.get("beta_slow", float, None) or 1.0,
            mscale=p.get("mscale", float, None), mscale_all_dim=p.get("mscale_all_dim", float, None),
            truncate=p.get("truncate", bool, True),
        )  # fmt: skip
    if rope_type == "longrope":
        factors = [_factor_list(p, key, rotary_dim // 2) for key in ("short_factor", "long_factor")]
        return RopeConfig(
            **common, attention_factor=p.get("attention_factor", float, None),
            short_factor=factors[0], long_factor=factors[1],
        )  # fmt: skip
    return RopeConfig(**common)


def _factor_list(p: _Reader, key: str, length: int) -> tuple[float, ...]:
    values = p.get(key, list)
    if len(values) != length or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise CheckpointError(f"{p.file}: '{key}' must list {length} numbers (one per rotary frequency)")
    return tuple(float(v) for v in values)


def _gemma(r: _Reader, model_type: str, dtype: str) -> DecoderConfig:
    """Gemma (1), Gemma 2 and Gemma 3's text model (gemma3_text), with transformers' defaults for absent keys."""
    gemma1, gemma3 = model_type == "gemma", model_type == "gemma3_text"
    hidden, heads = r.positive("hidden_size"), r.positive("num_attention_heads")
    kv_heads = r.positive("num_key_value_heads", heads)
    if heads % kv_heads:
        raise CheckpointError(
            f"config.json: num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})"
        )
    head_dim = r.positive("head_dim", 256)
    act = r.get("hidden_activation", str, None) or r.get("hidden_act", str, "gelu_pytorch_tanh")
    if gemma1 and act == "gelu":  # Google's first files say "gelu" and mean the tanh form, as transformers reads it
        act = "gelu_pytorch_tanh"
    if act not in ("gelu_pytorch_tanh", "gelu_new"):
        raise CheckpointError(f"config.json: hidden_activation '{act}' is not supported (gelu_pytorch_tanh)")
    if r.get("use_bidirectional_attention", bool, False):
        raise CheckpointError("config.json: use_bidirectional_attention is not supported (serve generates causally)")
    layers = r.positive("num_hidden_layers")
    types = ["full_attention"] * layers if gemma1 else r.get("layer_types", list, None)
    if types is None:  # transformers' pattern: every n-th layer (n = 2 for Gemma 2, 6 for Gemma 3) is full
        every = r.positive("sliding_window_pattern", 6) if gemma3 else 2
        types = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(layers)]
    if len(types) != layers or any(t not in ("full_attention", "sliding_attention") for t in types):
        raise CheckpointError(
            f"config.json: 'layer_types' must list {layers} entries of 'full_attention' or 'sliding_attention'"
        )
    window = r.positive("sliding_window", 4096)
    rope, local_rope = _gemma3_ropes(r, head_dim) if gemma3 else (_rope(r, head_dim), None)
    return DecoderConfig(
        model_type=model_type, vocab_size=r.positive("vocab_size"), hidden_size=hidden, num_layers=layers,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=r.positive("intermediate_size"),
        max_position_embeddings=r.positive("max_position_embeddings", 131072 if gemma3 else 8192),
        norm_eps=r.get("rms_norm_eps", float, 1e-6), tie_word_embeddings=r.get("tie_word_embeddings", bool, True),
        hidden_act=act, attention_bias=r.get("attention_bias", bool, False), qk_norm=gemma3,
        sliding_windows=tuple(window if t == "sliding_attention" else None for t in types), rope=rope, dtype=dtype,
        query_pre_attn_scalar=None if gemma1 else r.get("query_pre_attn_scalar", float, 256.0),
        # transformers' Gemma 3 attention does not softcap its scores whatever the config says; Gemma 2's does
        attn_logit_softcapping=None if gemma1 or gemma3 else _nullable(r, "attn_logit_softcapping", 50.0),
        final_logit_softcapping=None if gemma1 else _nullable(r, "final_logit_softcapping", None if gemma3 else 30.0),
        local_rope=local_rope,
    )  # fmt: skip


def _nullable(r: _Reader, key: str, default: float | None) -> float | None:
    """`key` as a float, None when config.json says null, `default` when it is absent."""
    if key not in r.data:
        return default
    return None if r.data[key] is None else float(r.get(key, float))


def _gemma3_ropes(r: _Reader, head_dim: int) -> tuple[RopeConfig, RopeConfig]:
    """Gemma 3's two RoPEs, (full layers', sliding layers'): transformers 5 nests rope_parameters by layer type;
    older files give rope_theta (full), rope_local_base_freq (sliding) and rope_scaling (full layers only)."""
    params = r.get("rope_parameters", dict, None)
    if params is not None and ("full_attention" in params or "sliding_attention" in params):
        nested = _Reader(params, "config.json rope_parameters")
        full, local = (nested.get(k, dict, None) or {} for k in ("full_attention", "sliding_attention"))
        return _rope(r, head_dim, full, 1_000_000.0), _rope(r, head_dim, local, 10_000.0)
    full = dict(params or r.get("rope_scaling", dict, None) or {})
    local = {"rope_type": "default", "rope_theta": r.get("rope_local_base_freq", float, 10_000.0)}
    return _rope(r, head_dim, full, 1_000_000.0), _rope(r, head_dim, local)
