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
- Variants: "default"; "linear" (positions divided by `factor`, i.e. frequencies divided); "llama3" (Llama 3.1's
  wavelength-dependent scaling: long wavelengths divided by `factor`, short ones kept, a smooth blend between).
"""

from __future__ import annotations

import math

import numpy as np

from serve.zoo.decoders.config import RopeConfig

__all__ = ["Rope"]


class Rope:
    def __init__(self, config: RopeConfig, head_dim: int) -> None:
        self.rotary_dim = int(head_dim * config.partial_rotary_factor)
        self.inv_freq = inverse_frequencies(config, self.rotary_dim)  # (rotary_dim/2,) float32

    def cos_sin(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin of the step's rows, (T, 1, rotary_dim/2) each, to broadcast over heads."""
        angles = positions.astype(np.float32)[:, None] * self.inv_freq[None, :]  # (T, rotary_dim/2)
        return np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]

    def apply(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """x, (T, heads, head_dim), rotated: a new array, x is not changed."""
        half, rot = self.rotary_dim // 2, self.rotary_dim
        x1, x2 = x[..., :half], x[..., half:rot]  # (T, heads, half) each
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., rot:]], axis=-1)


def inverse_frequencies(config: RopeConfig, dim: int) -> np.ndarray:
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim
    inv_freq = (1.0 / (np.float32(config.theta) ** exponents)).astype(np.float32)  # (dim/2,)
    if config.rope_type == "linear":
        return (inv_freq / np.float32(config.factor)).astype(np.float32)
    if config.rope_type == "llama3":
        return _llama3(inv_freq, config)
    return inv_freq


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
