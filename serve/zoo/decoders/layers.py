"""The pieces every decoder family is made of, on numpy arrays of the whole ragged batch: (T, features) rows.

Decisions, and why:
- Plain numpy functions, not serve.nn Modules: a step runs once per generated token and its work is a handful of
  large products; Module dispatch and Tensor wrapping would add Python per op for nothing the engine needs
  (no autograd, no hooks). The arithmetic is transformers' (float32 norms, the same epsilon placement).
- `Linear` is the one place a product happens: weights are stored pre-transposed, (in, out) and contiguous, for
  `x @ W`. A faster product (serve/backend's packed GEMM, bf16 weights with AVX512-BF16 / AMX) replaces
  `Linear.__call__` and `Linear.__init__`'s storage only; the families do not change.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Linear", "gelu_tanh", "layer_norm", "rms_norm", "silu_and_mul"]


class Linear:
    """y = x @ weight (+ bias); weight is (in, out), contiguous."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None = None) -> None:
        self.weight = np.ascontiguousarray(weight)
        self.bias = bias

    @property
    def out_features(self) -> int:
        return int(self.weight.shape[1])

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = x @ self.weight  # (T, in) @ (in, out) -> (T, out)
        if self.bias is not None:
            y += self.bias
        return y


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis (transformers' LlamaRMSNorm, in float32)."""
    variance = np.mean(np.square(x), axis=-1, keepdims=True)
    return (x / np.sqrt(variance + np.float32(eps))) * weight


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    variance = np.mean(np.square(centered), axis=-1, keepdims=True)
    return centered / np.sqrt(variance + np.float32(eps)) * weight + bias


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GPT-2's GELU ("gelu_new", "gelu_pytorch_tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    inner = np.float32(np.sqrt(2.0 / np.pi)) * (x + np.float32(0.044715) * x * x * x)
    return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner))


def silu_and_mul(gate_up: np.ndarray) -> np.ndarray:
    """SwiGLU: silu(gate) * up, from the fused (T, 2 * intermediate) product, gate first."""
    half = gate_up.shape[-1] // 2
    gate, up = gate_up[:, :half], gate_up[:, half:]
    with np.errstate(over="ignore"):  # exp(-gate) of a very negative gate is inf: silu is -0 there, as it should be
        return gate / (np.float32(1.0) + np.exp(-gate)) * up
