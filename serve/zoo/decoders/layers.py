"""The pieces every decoder family is made of, on numpy arrays of the whole ragged batch: (T, features) rows.

Decisions, and why:
- Plain numpy functions, not serve.nn Modules: a step runs once per generated token and its work is a handful of
  large products; Module dispatch and Tensor wrapping would add Python per op for nothing the engine needs
  (no autograd, no hooks). The arithmetic is transformers' (float32 norms, the same epsilon placement).
- `Linear` is the one place a product happens. Its weight is given pre-transposed, (in, out), and packed at load
  for serve's native GEMM (serve/backend/cpu_native: column panels, so no per-call packing of a weight that
  OpenBLAS would repack on every call) in one column slice per lane (cpu_threads): each lane streams its half of
  the weight, the whole of what a decode step costs. Measured on GPT-2 small's products at 16 rows (2 lanes,
  loaded AMD EPYC): the vocabulary product 27 ms packed against 48 ms through numpy's OpenBLAS. Without the
  native library (SERVE_NATIVE=0, a CPU without AVX2) the product is numpy's, split by cpu_blas.
- dtype "bfloat16" packs the weight as bf16 for the AVX512-BF16 kernel (fp32 activations rounded to bf16 on the
  fly, fp32 accumulation and output): half the bytes per token. Refused where the CPU or the build lacks it.
- The lanes write their columns of one output (the kernel takes a row stride), and what follows a product in a
  block goes into the kernel's epilogue: the activation (GPT-2's GELU after c_fc) or the residual add (x + o_proj,
  x + down), so neither is a numpy pass over the (T, out) result. Either one, not both: the kernel adds the
  residual before the activation, which no block wants.
- dtype "int8" is weight-only int8 (serve.backend.cpu_int8: per-column scales, quantised here at load, fp32
  activations widened against the int8 weights in registers): a quarter of fp32's bytes per token, the decode
  step's cost; the numpy fallback dequantises per call where the native library is absent.
- layer_norm runs the native kernel (sk_norm.c, PyTorch's LayerNorm) where it is loaded: one pass instead of
  numpy's six; so do rms_norm and silu_and_mul (serve.backend.cpu_decode), numpy's arithmetic where it is not.
"""

from __future__ import annotations

import numpy as np

from serve.backend import cpu_blas, cpu_decode, cpu_int8, cpu_native, cpu_threads

__all__ = ["Linear", "add_rms_norm", "gelu_tanh", "layer_norm", "rms_norm", "silu_and_mul"]


class Linear:
    """y = x @ weight (+ bias); weight is (in, out)."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None = None, dtype: str = "float32") -> None:
        self.in_features, self.out_features = int(weight.shape[0]), int(weight.shape[1])
        self.bias = None if bias is None else np.ascontiguousarray(bias, np.float32)
        self.weight: np.ndarray | None = None
        self._parts: list[tuple[int, int, cpu_native.PackedWeight | cpu_int8.QuantizedWeight, np.ndarray | None]] = []
        if dtype == "bfloat16" and not cpu_native.bf16_available():
            raise ValueError("bfloat16 weights need a CPU with AVX512-BF16 and serve's native kernels; use float32")
        if dtype == "int8" or cpu_native.available():
            columns = cpu_threads.spans(self.out_features, grain=64)
            b = self.bias
            pack = cpu_int8.quantize_weight if dtype == "int8" else lambda w: cpu_native.pack_weight(w, dtype)
            packs = [(c0, c1, pack(weight[:, c0:c1])) for c0, c1 in columns]
            self._parts = [(c0, c1, w, None if b is None else b[c0:c1]) for c0, c1, w in packs]
        else:
            self.weight = np.ascontiguousarray(weight, np.float32)

    def __call__(self, x: np.ndarray, act: str = "none", residual: np.ndarray | None = None) -> np.ndarray:
        """act(x @ weight + bias), or x @ weight + bias + residual; act is "none" or "gelu_tanh"."""
        if act not in _ACTS or (act != "none" and residual is not None):
            raise ValueError(f"Linear: act {act!r} with residual {residual is not None}; expected one of {_ACTS}, "
                             "or a residual without an activation")  # fmt: skip
        if self.weight is not None:
            y = cpu_blas.matmul(x, self.weight)  # (T, in) @ (in, out) -> (T, out)
            if self.bias is not None:
                y += self.bias
            if residual is not None:
                y += residual
            return _ACTS[act](y)
        x = np.ascontiguousarray(x, np.float32)
        out = np.empty((x.shape[0], self.out_features), np.float32)  # (T, out): each lane writes its columns
        res = None if residual is None else np.ascontiguousarray(residual, np.float32)

        def run(i: int, _: int) -> None:
            c0, c1, packed, bias = self._parts[i]
            part = None if res is None else res[:, c0:c1]
            gemm = cpu_int8.gemm if isinstance(packed, cpu_int8.QuantizedWeight) else cpu_native.gemm
            gemm(x, packed, bias, residual=part, act=act, out=out[:, c0:c1])  # type: ignore[arg-type]  # (T, c1 - c0)

        cpu_threads.parallel(run, [(i, i + 1) for i in range(len(self._parts))])
        return out


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis (transformers' LlamaRMSNorm, in float32)."""
    if x.ndim == 2 or (x.ndim > 2 and x.flags.c_contiguous):
        y = cpu_decode.rms_norm(x.reshape(-1, x.shape[-1]), weight, eps)  # (rows, N); None: no kernel
        if y is not None:
            return y.reshape(x.shape)
    variance = np.mean(np.square(x), axis=-1, keepdims=True)
    return (x / np.sqrt(variance + np.float32(eps))) * weight


def add_rms_norm(x: np.ndarray, y: np.ndarray, weight: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(s, rms_norm(s)) for s = x + y, (T, N) each: a residual add and the norm after it, one native pass."""
    s = np.empty_like(x, dtype=np.float32)
    h = cpu_decode.rms_norm(x, weight, eps, residual=y, sum_out=s) if x.shape == y.shape else None
    if h is not None:
        return s, h
    s = x + y
    return s, rms_norm(s, weight, eps)


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    if cpu_native.available() and x.dtype == np.float32:
        return cpu_native.layer_norm(np.ascontiguousarray(x), weight, bias, eps)
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    variance = np.mean(np.square(centered), axis=-1, keepdims=True)
    return centered / np.sqrt(variance + np.float32(eps)) * weight + bias


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GPT-2's GELU ("gelu_new", "gelu_pytorch_tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    inner = np.float32(np.sqrt(2.0 / np.pi)) * (x + np.float32(0.044715) * x * x * x)
    return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner))


_ACTS = {"none": lambda y: y, "gelu_tanh": gelu_tanh}


def silu_and_mul(gate_up: np.ndarray) -> np.ndarray:
    """SwiGLU: silu(gate) * up, from the fused (T, 2 * intermediate) product, gate first."""
    y = cpu_decode.glu(gate_up, "silu")  # one native pass; None: no kernel
    if y is not None:
        return y
    half = gate_up.shape[-1] // 2
    gate, up = gate_up[:, :half], gate_up[:, half:]
    with np.errstate(over="ignore"):  # exp(-gate) of a very negative gate is inf: silu is -0 there, as it should be
        return gate / (np.float32(1.0) + np.exp(-gate)) * up
