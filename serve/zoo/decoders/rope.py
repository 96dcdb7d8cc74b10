"""Rotary position embeddings: the inverse frequencies each RoPE variant defines, and their application to q and k.

Decisions, and why:
- The frequencies are computed once at load (float32 as transformers computes them) and cos/sin per step from
  the step's positions: a step's rows are any positions of any sequences, so a table indexed by position would
  have to cover max_position_embeddings; computing (T, rotary_dim/2) angles per step is cheap next to the products.
- Angles are formed in float32 like transformers (positions (float) times inv_freq), so long positions round the
  same way as the reference.
- The rotation is transformers' "rotate_half" layout (the first half of the rotary dims paired with the second
  half), which is what Hugging Face checkpoints' q/k projections are permuted for; with a partial rotary factor
  only the first `rotary_dim` dims of each head rotate.
- Variants (transformers' modeling_rope_utils formulas, in float32 where it computes in float32): "default";
  "linear" (frequencies divided by `factor`); "llama3" (Llama 3.1's wavelength-dependent scaling: long wavelengths
  divided by `factor`, short ones kept, a smooth blend between); "yarn" (interpolated low frequencies, extrapolated
  high ones, a linear ramp between the dims that turn beta_slow and beta_fast times over the original context; cos
  and sin scaled by the attention factor, 0.1 ln(factor) + 1 unless given); "longrope" (Phi-3: each frequency
  divided by its short or long factor, cos and sin scaled by sqrt(1 + ln(factor) / ln(original context)));
  "dynamic" (NTK: the base grows with the sequence's length beyond max_position_embeddings).
- dynamic depends on the sequence's length, as transformers computes it per forward call from the call's largest
  position: here per sequence of the step (its `context_lens`, the length it reaches), so a sequence's rows rotate
  alike whatever else is in the batch. transformers rotates a cached key with the frequencies of the call that
  computed it and so does the paged cache; a prompt chunked over steps rotates each chunk with its own step's
  length (transformers' prefill rotates all of it with the prompt's length). A cached key's rotation depends on
  its sequence's length, so such a decoder says `prefix_caching = False` (step.py).
- longrope: the short or the long factors for every sequence, chosen once: the long ones when the sequences may
  grow past original_max_position_embeddings (`max_model_len`, else max_position_embeddings, beyond it), vLLM's
  rule. transformers picks per forward call by the sequence's length and, in Phi-3's generate, recomputes the
  whole cache when a sequence crosses; the paged engine cannot (a step has only the new tokens, prompts are
  chunked), and keys of both kinds in one sequence make it babble (vLLM's per-batch switch did: its PR 27431).
  So a sequence is exactly transformers' when both pick the same factors: any sequence beyond the original
  context, and every sequence when max_model_len stays within it.
- `apply_` rotates q's and k's heads in place where the QKV product wrote them (serve.backend.cpu_decode, one
  native pass); `apply` is the numpy arithmetic, used where the kernel is not loaded and as its test reference.
"""

from __future__ import annotations

import math

import numpy as np

from serve.backend import cpu_decode
from serve.zoo.decoders.config import RopeConfig
from serve.zoo.decoders.step import StepBatch

__all__ = ["Rope"]


class Rope:
    def __init__(self, config: RopeConfig, head_dim: int) -> None:
        self.config = config
        self.rotary_dim = int(head_dim * config.partial_rotary_factor)
        self.inv_freq = inverse_frequencies(config, self.rotary_dim)  # (rotary_dim/2,) float32
        self.scaling = attention_factor(config)  # cos and sin are multiplied by it (yarn, longrope)

    def cos_sin(self, positions: np.ndarray, seq_lens: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin of the step's rows, (T, 1, rotary_dim/2) each, to broadcast over heads. `seq_lens` (T,) is
        the length each row's sequence reaches in the step (dynamic depends on it)."""
        inv_freq = self._row_frequencies(seq_lens)  # (rotary_dim/2,) or (T, rotary_dim/2)
        angles = positions.astype(np.float32)[:, None] * inv_freq  # (T, rotary_dim/2)
        cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
        if self.scaling != 1.0:
            cos, sin = cos * np.float32(self.scaling), sin * np.float32(self.scaling)
        return cos, sin

    def for_step(self, batch: StepBatch) -> tuple[np.ndarray, np.ndarray]:
        """cos_sin of the step's rows, each row's sequence length from the batch when the variant needs it."""
        lens = None
        if self.config.rope_type == "dynamic":
            lens = np.repeat(batch.context_lens, np.diff(batch.query_starts))  # (T,): the length of each row's sequence
        return self.cos_sin(batch.positions, lens)

    def _row_frequencies(self, seq_lens: np.ndarray | None) -> np.ndarray:
        c = self.config
        if seq_lens is None or c.rope_type != "dynamic":
            return self.inv_freq[None, :]
        grown = seq_lens > c.max_position_embeddings
        if not grown.any():
            return self.inv_freq[None, :]
        out = np.broadcast_to(self.inv_freq, (len(seq_lens), len(self.inv_freq))).copy()  # (T, rotary_dim/2)
        for length in np.unique(seq_lens[grown]):
            out[seq_lens == length] = _dynamic(c, self.rotary_dim, int(length))
        return out

    def apply_(self, x: np.ndarray, heads: int, head_dim: int, cos: np.ndarray, sin: np.ndarray) -> bool:
        """Rotate in place the first `heads` heads of each row of x, (T, >= heads * head_dim) with contiguous
        rows (q's and k's heads where the QKV product wrote them), natively; False (x untouched) where the kernel
        does not apply, and the caller uses `apply`."""
        return cpu_decode.rope_(x, heads, head_dim, self.rotary_dim, cos, sin)

    def apply(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """x, (T, heads, head_dim), rotated: a new array, x is not changed."""
        half, rot = self.rotary_dim // 2, self.rotary_dim
        x1, x2 = x[..., :half], x[..., half:rot]  # (T, heads, half) each
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., rot:]], axis=-1)


def inverse_frequencies(config: RopeConfig, dim: int) -> np.ndarray:
    """The variant's frequencies, (dim/2,) float32; dynamic's for a sequence within max_position_embeddings
    (Rope.cos_sin grows them per sequence beyond it)."""
    inv_freq = _default(config.theta, dim)
    if config.rope_type == "linear":
        return (inv_freq / np.float32(config.factor)).astype(np.float32)
    if config.rope_type == "llama3":
        return _llama3(inv_freq, config)
    if config.rope_type == "yarn":
        return _yarn(config, dim)
    if config.rope_type == "longrope":
        return _longrope(config, dim, config.long_factor if uses_long_factors(config) else config.short_factor)
    return inv_freq


def context_length(c: RopeConfig) -> int:
    """The longest sequence the RoPE is made for (the engine's bound on max_model_len), as vLLM derives it: linear
    and dynamic stretch max_position_embeddings by their factor, yarn the original context by its factor; the
    others' configs already name the extended context (so do Gemma 3's, whose linear factor vLLM leaves out too)."""
    if c.rope_type in ("linear", "dynamic"):
        return int(c.max_position_embeddings * c.factor)
    if c.rope_type == "yarn":
        return max(c.max_position_embeddings, int(c.original_max_position_embeddings * c.factor))
    return c.max_position_embeddings


def uses_long_factors(c: RopeConfig) -> bool:
    """longrope: whether sequences may grow past the original context (module docstring: vLLM's rule)."""
    return (c.max_model_len or c.max_position_embeddings) > c.original_max_position_embeddings


def attention_factor(c: RopeConfig) -> float:
    """What yarn and longrope scale cos and sin by (1.0 for the other variants)."""
    if c.rope_type not in ("yarn", "longrope"):
        return 1.0
    if c.attention_factor is not None:
        return c.attention_factor
    if c.rope_type == "longrope":
        if c.factor <= 1.0:
            return 1.0
        return math.sqrt(1 + math.log(c.factor) / math.log(c.original_max_position_embeddings))

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if c.mscale and c.mscale_all_dim:
        return mscale(c.factor, c.mscale) / mscale(c.factor, c.mscale_all_dim)
    return mscale(c.factor)


def _default(theta: float, dim: int) -> np.ndarray:
    return (np.float32(1.0) / (np.float32(theta) ** _exponents(dim))).astype(np.float32)  # (dim/2,)


def _dynamic(c: RopeConfig, dim: int, seq_len: int) -> np.ndarray:
    """NTK scaling for a sequence of `seq_len` > max_position_embeddings: the base raised so the lowest frequency
    stretches over the longer sequence (float32, as transformers computes it from a tensor length)."""
    f32 = np.float32
    grown = f32(c.factor) * f32(seq_len) / f32(c.max_position_embeddings) - f32(c.factor - 1)
    base = f32(c.theta) * grown ** f32(dim / (dim - 2))
    return (f32(1.0) / (base ** _exponents(dim))).astype(f32)


def _exponents(dim: int) -> np.ndarray:
    return np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)


def _yarn(c: RopeConfig, dim: int) -> np.ndarray:
    pos_freqs = np.float32(c.theta) ** _exponents(dim)  # (dim/2,)
    extrapolation = np.float32(1.0) / pos_freqs
    interpolation = np.float32(1.0) / (np.float32(c.factor) * pos_freqs)

    def correction_dim(rotations: float) -> float:  # the dim that turns `rotations` times over the original context
        return dim * math.log(c.original_max_position_embeddings / (rotations * 2 * math.pi)) / (2 * math.log(c.theta))

    low, high = correction_dim(c.beta_fast), correction_dim(c.beta_slow)
    if c.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - np.float32(low)) / np.float32(high - low), 0, 1)
    extrapolated = np.float32(1.0) - ramp.astype(np.float32)  # 1 for the high frequencies, kept as they are
    return (interpolation * (1 - extrapolated) + extrapolation * extrapolated).astype(np.float32)


def _longrope(c: RopeConfig, dim: int, factors: tuple[float, ...]) -> np.ndarray:
    ext = np.asarray(factors, np.float32)  # (dim/2,)
    return (np.float32(1.0) / (ext * np.float32(c.theta) ** _exponents(dim))).astype(np.float32)


def _llama3(inv_freq: np.ndarray, c: RopeConfig) -> np.ndarray:
    low_freq_wavelen = c.original_max_position_embeddings / c.low_freq_factor
    high_freq_wavelen = c.original_max_position_embeddings / c.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / c.factor, inv_freq)
    smooth = (c.original_max_position_embeddings / wavelen - c.low_freq_factor) / (
        c.high_freq_factor - c.low_freq_factor
    )
    blended = (1 - smooth) * scaled / c.factor + smooth * scaled
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return np.where(medium, blended, scaled).astype(np.float32)
