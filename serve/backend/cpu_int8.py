"""Weight-only int8 products on the CPU: a float weight quantised once at load, per output column, and multiplied by
float32 activations in the native kernel (serve/backend/native/sk_w8.c).

Decisions, and why:
- Symmetric per-channel int8 (scale = max |w[:, n]| / 127, zero point 0, values clipped to [-127, 127]), PyTorch's
  and llama.cpp's Q8 idea at the granularity of an output channel: no calibration data, and a channel's largest
  weight is kept exactly. A column of zeros gets scale 1 (its products stay 0).
- Weight-only: the activations stay float32 and the kernel widens the int8 weights to float32 in registers, so the
  only error is the weights' rounding (|dw| <= scale / 2). What it buys is bytes: a decode step, which reads every
  weight once per token, streams a quarter of fp32's and half of bf16's (issue 27, item 3).
- Where the native library is not loaded (SERVE_NATIVE=0, a CPU without AVX2) the same arithmetic runs in numpy
  on the int8 weight (dequantised per call: slow, but the memory stays a quarter).
- The layout is the kernel's (column panels `width` wide, K rows each, int8), made here with numpy; `width` comes
  from the loaded build (32 columns on AVX-512, 16 on AVX2) so a packed weight matches the kernel that reads it.
- From BF16_ROWS rows, where the AVX512-BF16 build is loaded, the bf16 route (sk_w8.c's sk_gemm_w8_bf16): the int8
  panels widened to bf16 (exact) a group at a time and multiplied by vdpbf16ps, the activations rounded to bf16.
  Why: past a few rows the register kernel is bound by its fp32 FMAs, fp32's speed, and a 16-row decode step with
  int8 weights ran slower than with bf16 ones (GPT-2, 35.1 against 26.3 ms). Measured single lane, K768 x N1152,
  24 weights cycled from memory (ms, register route / bf16 route): 4 rows 0.113 / 0.133, 8 rows 0.186 / 0.167,
  16 rows 0.331 / 0.234 (bf16 weights 0.157: the widening is the rest); so 8. Since the route widens 2 MiB groups
  (sk_w8.c's DEQUANT_BF16_BYTES): 4 rows 0.110 / 0.083, 8 rows 0.181 / 0.120, 16 rows 0.323 / 0.183 (bf16 weights
  0.169): 4 rows would now win the product, but a batch-4 GPT-2 step moved within its noise (1-2 ms of 17-20), so 8
  stays (bench/RESULTS.md, issue 25). The numeric cost is the activations' rounding, 2^-9 relative per product term:
  on tinychat's trained weights a 38-token prefill's logits move 0.7% of their range against the fp32-activation route
  (int8 against fp32 weights: 1.1% -> 1.5%), every argmax kept.
  `gemm(..., bf16=False)` keeps fp32 activations.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from serve.backend import cpu_native

__all__ = ["ACTIVATIONS", "BF16_ROWS", "QuantizedWeight", "available", "bf16_available", "dequantize", "gemm",
           "gemm_operands", "quantize_columns", "quantize_weight"]  # fmt: skip

ACTIVATIONS = ("none", "relu", "gelu_tanh", "silu")
_PTR, _I64, _INT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
_SIGNATURE: list[Any] = [_PTR, _I64, _I64, _I64, _PTR, _I64, _PTR, _PTR, _PTR, _I64, _PTR, _I64, _INT, _I64, _I64]


_BOUND: dict[int, tuple[Any, int]] = {}  # id(library) -> (sk_gemm_w8 with its argtypes, the panel width)
_FALLBACK_WIDTH = 32
BF16_ROWS = 8  # from this many rows the bf16 route (sk_gemm_w8_bf16) runs where it is loaded: module docstring


def _bf16_kernel() -> tuple[Any, int] | None:
    """sk_gemm_w8_bf16 of the loaded AVX512-BF16 build (the int8 panels widened to bf16 for vdpbf16ps), or None."""
    dll = cpu_native.bf16_library()
    if dll is None or not hasattr(dll, "sk_gemm_w8_bf16") or cpu_native.library() is None:
        return None
    key = -id(dll)
    if key not in _BOUND:
        fn, width = dll.sk_gemm_w8_bf16, dll.sk_w8_width
        fn.argtypes, fn.restype, width.restype = _SIGNATURE, ctypes.c_int, ctypes.c_int64
        _BOUND[key] = (fn, int(width()))
    return _BOUND[key]


def _kernel() -> tuple[Any, int] | None:
    """The int8 kernel of the library cpu_native runs now (tests switch builds), and its panel width."""
    dll = cpu_native.library()
    if dll is None or not hasattr(dll, "sk_gemm_w8"):
        return None
    if id(dll) not in _BOUND:
        fn, width = dll.sk_gemm_w8, dll.sk_w8_width
        fn.argtypes, fn.restype, width.restype = _SIGNATURE, ctypes.c_int, ctypes.c_int64
        _BOUND[id(dll)] = (fn, int(width()))
    return _BOUND[id(dll)]


def available() -> bool:
    """True when the native int8 kernel is loaded (else gemm runs the numpy fallback)."""
    return _kernel() is not None


def bf16_available() -> bool:
    """True when the bf16 route (sk_gemm_w8_bf16, AVX512-BF16) is loaded for weights packed for the loaded build."""
    route, native = _bf16_kernel(), _kernel()
    return route is not None and native is not None and route[1] == native[1]


class QuantizedWeight:
    """w (K, N) as int8 panels (npanels, K, width) and float32 scales (npanels * width,), zero-padded past N."""

    __slots__ = ("data", "k", "n", "scale", "width")

    def __init__(self, data: np.ndarray, scale: np.ndarray, k: int, n: int, width: int) -> None:
        self.data, self.scale, self.k, self.n, self.width = data, scale, k, n, width

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes + self.scale.nbytes)

    def __repr__(self) -> str:
        return f"QuantizedWeight(k={self.k}, n={self.n}, int8, per-column scales)"


def quantize_columns(w_kn: np.ndarray, op: str = "quantize_weight") -> tuple[np.ndarray, np.ndarray]:
    """w (K, N) as int8 per column (module docstring): (q (K, N) int8, scale (N,) float32), w ~ q * scale. Shared
    by the weight-only kernel's packing here and the dynamic int8 one's (cpu_i8.pack); `op` names the caller in
    errors."""
    w = np.asarray(w_kn, np.float32)
    if w.ndim != 2 or w.shape[0] == 0 or w.shape[1] == 0:
        raise ValueError(f"{op}: expected a non-empty (K, N) matrix, got shape {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError(f"{op}: the weight holds NaN or infinity; int8 cannot represent it")
    peak = np.abs(w).max(axis=0)  # (N,)
    scale = np.where(peak > 0, peak / np.float32(127), np.float32(1)).astype(np.float32)
    return np.clip(np.rint(w / scale), -127, 127).astype(np.int8), scale  # (K, N), (N,)


def quantize_weight(w_kn: np.ndarray) -> QuantizedWeight:
    """Quantise w (K, N), the right operand of out = a @ w, to int8 per column (module docstring)."""
    q, scale = quantize_columns(w_kn)
    k, n = q.shape
    native = _kernel()
    width = native[1] if native is not None else _FALLBACK_WIDTH
    panels = -(-n // width)
    padded = np.zeros((k, panels * width), np.int8)
    padded[:, :n] = q
    data = np.ascontiguousarray(padded.reshape(k, panels, width).transpose(1, 0, 2))  # (panels, K, width)
    scales = np.zeros(panels * width, np.float32)
    scales[:n] = scale
    return QuantizedWeight(data, scales, k, n, width)


def dequantize(qw: QuantizedWeight) -> np.ndarray:
    """The float32 (K, N) matrix the kernel multiplies by: q * scale."""
    q = qw.data.transpose(1, 0, 2).reshape(qw.k, -1)[:, : qw.n]  # (K, N)
    return q.astype(np.float32) * qw.scale[: qw.n]


def _numpy_act(y: np.ndarray, act: str) -> np.ndarray:
    if act == "relu":
        return np.maximum(y, 0, out=y)
    if act == "gelu_tanh":
        return 0.5 * y * (1 + np.tanh(np.float32(0.7978845608028654) * (y + np.float32(0.044715) * y**3)))
    if act == "silu":
        return y / (1 + np.exp(-y))
    return y


def gemm_operands(
    a: Any, k: int, n: int, bias: np.ndarray | None, residual: np.ndarray | None, out: np.ndarray | None
) -> tuple[np.ndarray | None, np.ndarray]:
    """The int8 GEMMs' checks (here and cpu_i8): `a` a float32 (M, k) array, `bias` contiguous float32 (n,),
    `residual` and `out` (M, n) with contiguous rows and any row stride; returns them checked, `out` made when None."""
    if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.ndim != 2 or a.shape[1] != k:
        raise ValueError(f"int8 gemm: expected a float32 (M, {k}) array, got {getattr(a, 'dtype', '?')} "
                         f"{getattr(a, 'shape', '')}")  # fmt: skip
    m = a.shape[0]
    if bias is not None and (bias.dtype != np.float32 or bias.shape != (n,) or not bias.flags.c_contiguous):
        raise ValueError(f"int8 gemm: bias must be a contiguous float32 array of shape ({n},)")
    res = None if residual is None else cpu_native.rows_view("int8 gemm", "residual", residual, (m, n))
    made = np.empty((m, n), np.float32) if out is None else cpu_native.rows_view("int8 gemm", "out", out, (m, n))
    return res, made


def gemm(a: np.ndarray, qw: QuantizedWeight, bias: np.ndarray | None = None, residual: np.ndarray | None = None,
         act: str = "none", out: np.ndarray | None = None, bf16: bool | None = None) -> np.ndarray:  # fmt: skip
    """out[M, N] = act(a[M, K] @ (q * scale) + bias[N] + residual[M, N]); `out` and `residual` may be column slices
    of wider arrays (contiguous rows, any row stride), as in cpu_native.gemm. `bf16`: None picks the bf16 route
    (a rounded to bf16, module docstring) from BF16_ROWS rows where it is loaded; False never takes it; True takes
    it where it is loaded."""
    if act not in ACTIVATIONS:
        raise ValueError(f"int8 gemm: activation {act!r} is not supported; expected one of {ACTIVATIONS}")
    m, n = a.shape[0], qw.n
    res, out = gemm_operands(a, qw.k, n, bias, residual, out)
    native = _kernel()
    if bf16 is not False and (bf16 or m >= BF16_ROWS):
        route = _bf16_kernel()
        native = route if route is not None and route[1] == qw.width else native
    if native is None or native[1] != qw.width or m == 0:  # no kernel, or packed for another build's panels
        y = a @ dequantize(qw)  # (M, K) @ (K, N)
        if bias is not None:
            y += bias
        if res is not None:
            y += res
        out[...] = _numpy_act(y, act)
        return out
    x = np.ascontiguousarray(a)
    code = native[0](x.ctypes.data, m, qw.k, qw.k, qw.data.ctypes.data, n, qw.scale.ctypes.data,
              None if bias is None else bias.ctypes.data, None if res is None else res.ctypes.data,
              0 if res is None else cpu_native.row_stride(res), out.ctypes.data, cpu_native.row_stride(out),
              cpu_native.ACTIVATIONS.index(act), 0, n)  # fmt: skip
    if code != 0:
        raise ValueError(f"int8 gemm: the kernel refused its arguments (M={m}, K={qw.k}, N={n})")
    return out
