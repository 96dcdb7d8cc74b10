"""Dynamically quantised int8 products on the CPU (PyTorch's `quantize_dynamic` for a linear layer): int8 weights
quantised once, each call's activations quantised per row to u8 from their range, int32 accumulation on AVX512-VNNI
(serve/backend/native/sk_i8.c, whose docstring gives the arithmetic), float32 output with the fused epilogue.

Decisions, and why:
- For products bound by FLOPs (an encoder at batch 8 x 128), where the weight-only kernel (cpu_int8) gains nothing:
  vpdpbusd does four u8 x s8 multiply-adds per int32 lane, 4x an fp32 FMA's and 2x a bf16 dot product's.
- Weights as cpu_int8 quantises them (symmetric per output column, [-127, 127], scale max|w| / 127), packed in
  groups of 4 k per column for vpdpbusd, with each column's sum of int8 weights for the u8 zero point's correction.
  A quarter of fp32's bytes.
- Activations asymmetric u8 per row (zero point from the row's range, widened to hold 0, so 0 stays exact):
  per row, not PyTorch's per tensor, so a request's numbers do not depend on what it is batched with, and each
  token of a transformer gets its own range; asymmetric, so a GELU's output (mostly >= -0.17) spends its 256
  levels on the values it has. The error is the activation's rounding (s_r / 2 per element) and the weight's.
- The kernel lives in the AVX512-BF16 build (compiled with -mavx512vnni) and is bound here from
  cpu_native.bf16_library() only where /proc/cpuinfo lists avx512_vnni. Where that library is the AMX build, calls
  of 8 rows or more run on AMX-INT8 tiles (sk_amx_i8.c: TDPBUSD, the same integers, the same epilogue, so the same
  floats bit for bit; tests/unit/backend/test_amx_i8_emulated.py). Elsewhere (and for `numpy=True`, the tests'
  reference) the same arithmetic runs in numpy: the same u8 values, exact integer sums (in float64, exact below
  2^53), the same float32 scaling; so the kernel agrees with it to float32 rounding of the epilogue.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from serve.backend import cpu_int8, cpu_native, cpu_nn

__all__ = ["Int8Weight", "available", "gemm", "pack", "quantize_rows", "reference"]

_PTR, _I64, _INT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
_GEMM: list[Any] = [_PTR, _I64, _I64, _PTR, _I64, _PTR, _PTR, _PTR, _PTR, _I64, _PTR, _I64, _INT, _I64, _I64]
_QUANT: list[Any] = [_PTR, _I64, _I64, _PTR, _I64, _PTR, _PTR, _I64, _I64]
WIDTH = 32  # columns per packed panel (sk_i8.c's IW)
_BOUND: dict[Any, Any] = {}  # id(library) -> its sk_gemm_i8 (argtypes set) and sk_i8_quantize_rows; "vnni" -> flag


def _has_vnni() -> bool:
    """Whether /proc/cpuinfo lists avx512_vnni (read once)."""
    if "vnni" not in _BOUND:
        try:
            with open("/proc/cpuinfo") as f:
                _BOUND["vnni"] = any(line.startswith("flags") and "avx512_vnni" in line.split() for line in f)
        except OSError:
            _BOUND["vnni"] = False
    return bool(_BOUND["vnni"])


def _kernels() -> tuple[Any, Any] | None:
    """sk_gemm_i8 and sk_i8_quantize_rows of the loaded bf16-capable build, when the CPU has AVX512-VNNI."""
    dll = cpu_native.bf16_library()
    if dll is None or not hasattr(dll, "sk_gemm_i8") or not _has_vnni():
        return None
    if id(dll) not in _BOUND:
        gemm_fn, quant_fn = dll.sk_gemm_i8, dll.sk_i8_quantize_rows
        gemm_fn.argtypes, gemm_fn.restype = _GEMM, ctypes.c_int
        quant_fn.argtypes, quant_fn.restype = _QUANT, ctypes.c_int
        if dll.sk_i8_width() != WIDTH:
            raise RuntimeError(f"sk_i8.c packs {dll.sk_i8_width()} columns per panel, cpu_i8 expects {WIDTH}")
        _BOUND[id(dll)] = (gemm_fn, quant_fn)
    return _BOUND[id(dll)]


def available() -> bool:
    """True when the VNNI kernel is loaded (else gemm runs the numpy arithmetic)."""
    return _kernels() is not None


class Int8Weight:
    """w (K, N) as int8 panels (npanels, kp / 4, WIDTH, 4), per-column float32 scales and int32 column sums (both
    npanels * WIDTH, zero past N)."""

    __slots__ = ("colsum", "data", "k", "n", "q", "scale")

    def __init__(self, data: np.ndarray, q: np.ndarray, scale: np.ndarray, colsum: np.ndarray, k: int,
                 n: int) -> None:  # fmt: skip
        self.data, self.q, self.scale, self.colsum, self.k, self.n = data, q, scale, colsum, k, n

    @property
    def nbytes(self) -> int:
        """The bytes the kernel reads: the packed int8 weight, scales and column sums."""
        return int(self.data.nbytes + self.scale.nbytes + self.colsum.nbytes)

    def __repr__(self) -> str:
        return f"Int8Weight(k={self.k}, n={self.n}, int8 per-column, u8 activations per row)"


def pack(w_kn: np.ndarray) -> Int8Weight:
    """w (K, N), the right operand of out = a @ w, quantised to int8 per column and packed for the kernel."""
    q, scale = cpu_int8.quantize_columns(w_kn, "int8 pack")  # (K, N), (N,): the weight-only kernel's scheme
    k, n = q.shape
    kp, panels = -(-k // 4) * 4, -(-n // WIDTH)
    padded = np.zeros((kp, panels * WIDTH), np.int8)
    padded[:k, :n] = q
    # (kp, panels * W) -> (kp / 4, 4, panels, W) -> (panels, kp / 4, W, 4): packed[p][g][j][i] = q[4g + i][pW + j]
    data = np.ascontiguousarray(padded.reshape(kp // 4, 4, panels, WIDTH).transpose(2, 0, 3, 1))
    scales = np.zeros(panels * WIDTH, np.float32)
    scales[:n] = scale
    colsum = np.zeros(panels * WIDTH, np.int32)
    colsum[:n] = q.sum(axis=0, dtype=np.int32)
    return Int8Weight(data, q, scales, colsum, k, n)


def quantize_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row of a (M, K) as sk_i8.c quantises it: (u8 (M, K), scales (M,) float32, zero points (M,) int32)."""
    x = np.asarray(a, np.float32)
    mn = np.minimum(x.min(axis=1), np.float32(0)) if x.shape[1] else np.zeros(x.shape[0], np.float32)
    mx = np.maximum(x.max(axis=1), np.float32(0)) if x.shape[1] else np.zeros(x.shape[0], np.float32)
    s = ((mx - mn) / np.float32(255)).astype(np.float32)
    s = np.where(s > 0, s, np.float32(1)).astype(np.float32)
    z = np.clip(np.rint(-mn / s), 0, 255).astype(np.int32)
    inv = (np.float32(1) / s).astype(np.float32)
    u = np.clip(np.rint(x * inv[:, None]).astype(np.int64) + z[:, None], 0, 255).astype(np.uint8)  # (M, K)
    return u, s, z


def _native_quantize_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The kernel's own quantisation of a's rows (to test it against quantize_rows), or None without the kernel."""
    kernels = _kernels()
    if kernels is None:
        return None
    x = np.ascontiguousarray(a, np.float32)
    m, k = x.shape
    u, s, z = np.empty((m, k), np.uint8), np.empty(m, np.float32), np.empty(m, np.int32)
    if kernels[1](x.ctypes.data, k, k, u.ctypes.data, k, s.ctypes.data, z.ctypes.data, 0, m):
        raise ValueError(f"int8 quantize_rows: the kernel refused a ({m}, {k}) array")
    return u, s, z


_ACTS = {"none": 0, **{name: i for i, name in enumerate(cpu_native.ACTIVATIONS) if i}}


_NUMPY_ACTS = {"relu": cpu_nn.relu_, "gelu": lambda v: cpu_nn.gelu(v, "none"),
               "gelu_tanh": lambda v: cpu_nn.gelu(v, "tanh"), "silu": cpu_nn.silu,
               "hardswish": cpu_nn.hardswish, "relu6": lambda v: np.clip(v, 0, 6, out=v),
               "sigmoid": lambda v: np.float32(1) / (np.float32(1) + np.exp(-v))}  # fmt: skip


def _act(y: np.ndarray, act: str) -> np.ndarray:
    """The eager activations (float32), for the numpy path."""
    return y if act == "none" else np.asarray(_NUMPY_ACTS[act](y), np.float32)


def reference(a: np.ndarray, qw: Int8Weight, bias: np.ndarray | None = None, residual: np.ndarray | None = None,
              act: str = "none") -> np.ndarray:  # fmt: skip
    """The kernel's arithmetic in numpy: u8 rows, exact integer sums, float32 dequantisation and epilogue."""
    u, s, z = quantize_rows(a)
    acc = (u.astype(np.float64) @ qw.q.astype(np.float64)).astype(np.int64)  # (M, K) @ (K, N): exact, < 2^53
    t = (acc - z[:, None].astype(np.int64) * qw.colsum[: qw.n]).astype(np.int32).astype(np.float32)
    y = t * (s[:, None] * qw.scale[: qw.n])  # float32 (M, N)
    if bias is not None:
        y += bias
    if residual is not None:
        y += residual
    return _act(y, act)


def gemm(a: np.ndarray, qw: Int8Weight, bias: np.ndarray | None = None, residual: np.ndarray | None = None,
         act: str = "none", out: np.ndarray | None = None, rows: tuple[int, int] | None = None,
         numpy: bool = False) -> np.ndarray:  # fmt: skip
    """out[M, N] = act(dequant(u8(a) . q) + bias[N] + residual[M, N]), cpu_native.gemm's arguments: `a`,
    `residual` and `out` may have a row stride, `rows=(r0, r1)` computes only those rows (a lane's span)."""
    if act not in _ACTS:
        raise ValueError(f"int8 gemm: activation {act!r} is not supported; expected one of {sorted(_ACTS)}")
    res, out = cpu_int8.gemm_operands(a, qw.k, qw.n, bias, residual, out)
    m, n = a.shape[0], qw.n
    r0, r1 = (0, m) if rows is None else rows
    if not 0 <= r0 <= r1 <= m:
        raise ValueError(f"int8 gemm: rows {rows} outside 0..{m}")
    kernels = None if numpy else _kernels()
    if r1 == r0:
        return out
    if kernels is None:
        out[r0:r1] = reference(a[r0:r1], qw, bias, None if res is None else res[r0:r1], act)
        return out
    if a.strides[1] != 4 or a.strides[0] % 4:
        a = np.ascontiguousarray(a)
    code = kernels[0](a.ctypes.data, a.strides[0] // 4, qw.k, qw.data.ctypes.data, n, qw.scale.ctypes.data,
                      qw.colsum.ctypes.data, None if bias is None else bias.ctypes.data,
                      None if res is None else res.ctypes.data, 0 if res is None else cpu_native.row_stride(res),
                      out.ctypes.data, cpu_native.row_stride(out), _ACTS[act], r0, r1)  # fmt: skip
    if code == -2:
        raise MemoryError(f"int8 gemm: out of memory for the quantised rows (K={qw.k})")
    if code:
        raise ValueError(f"int8 gemm: the kernel refused its arguments (M={m}, K={qw.k}, N={n})")
    return out
