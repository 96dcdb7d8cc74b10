"""Native CPU kernels (serve/backend/native/serve_kernels.c) through ctypes: GEMM on packed weights,
implicit-GEMM convolution in NHWC, Winograd and depthwise convolution, max pooling, each with its epilogue fused:
out = act(acc + bias + residual); and LayerNorm with the residual add before it (sk_norm.c).

Which build runs is cpu_libraries' choice, made once at import: the fp32 one this CPU runs (AVX-512 or AVX2), and
beside it a bf16-capable one where the CPU has avx512_bf16, which runs the products of weights packed with
dtype="bfloat16" (`bf16_available()`): the fp32 input rounded to bf16 on the fly, fp32 accumulation (vdpbf16ps, or
AMX tiles where that build passed its self-check here: `bf16_engine()`), the fp32 epilogue and an fp32 output.
Nothing here raises at import: `available()` says whether the kernels can be called, and callers fall back to the
numpy kernels when it is False. This module holds the loaded builds, the packing, the GEMM and LayerNorm wrappers
and the argument checks; the convolution and pooling wrappers live in cpu_native_conv and are re-exported here, so
every kernel is `cpu_native.<name>`.

The wrappers stay thin because lanes (cpu_threads.parallel) call them from several Python threads at once: ctypes
releases the GIL for the call, and `rows`/`pixels` give each lane its own span of the output (any span, even one
that splits an image row or crosses samples). Arrays are float32 and C-contiguous; bad input raises ValueError.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from serve.backend import cpu_libraries
from serve.backend.cpu_libraries import AMX, FP32_BUILDS, Library

__all__ = ["ACTIVATIONS", "PackedWeight", "available", "bf16_available", "bf16_engine", "bf16_library", "conv2d_nhwc",
           "depthwise_nhwc", "gemm", "isa", "layer_norm", "max_pool_nhwc", "pack_conv_weight", "pack_weight",
           "pack_winograd_weight", "round_bf16", "winograd_nhwc", "winograd_tile", "winograd_tiles"]  # fmt: skip

ACTIVATIONS = ("none", "relu", "relu6", "gelu", "gelu_tanh", "silu", "hardswish", "sigmoid")
_ACT = {name: i for i, name in enumerate(ACTIVATIONS)}
DTYPES = ("float32", "bfloat16")
_lib: Library | None = cpu_libraries.first_library()
_bf16: Library | None = cpu_libraries.bf16_library()


def available() -> bool:
    """True when the native kernels are loaded and may be called."""
    return _lib is not None


def library() -> ctypes.CDLL | None:
    """The loaded fp32 kernel library itself, for the modules beside this one that bind their own kernels from it
    (cpu_int8: the int8 weight products of sk_w8.c); None when the native kernels are off."""
    return None if _lib is None else _lib.dll


def bf16_library() -> ctypes.CDLL | None:
    """The loaded bf16-capable kernel library itself (the AVX512-BF16 build, or the AMX one where it is selected),
    for the modules beside this one that bind their own kernels from it; None when there is none."""
    return None if _bf16 is None else _bf16.dll


def attention_kernel() -> Any:
    """The loaded build's fused attention (serve.backend.cpu_attention calls it), or None."""
    return None if _lib is None else _lib.attention


def attention_bf16_kernel() -> Any:
    """The bf16 build's fused attention (bf16 products, fp32 softmax; AMX tiles where that build is selected), or
    None without a bf16 build."""
    return None if _lib is None or _bf16 is None else _bf16.attention_bf16


def paged_decode_kernel() -> Any:
    """The loaded build's decode attention over a paged KV cache (serve.backend.cpu_paged calls it), or None."""
    return None if _lib is None else _lib.paged_decode


def bf16_available() -> bool:
    """True when weights packed with dtype="bfloat16" can be used: the kernels are on and the CPU has AVX512-BF16."""
    return _lib is not None and _bf16 is not None


def bf16_engine() -> str | None:
    """What runs the bf16 products: "amx" (the tile path, after its self-check passed on this CPU), "avx512_bf16"
    (vdpbf16ps), or None when there is no bf16 kernel; cpu_libraries.amx_status() says why not AMX."""
    if _lib is None or _bf16 is None:
        return None
    return "amx" if _bf16.name == AMX else "avx512_bf16"


def isa() -> str | None:
    """The loaded build: "avx512", "avx2", or None when the native kernels are off or missing."""
    return _lib.name if _lib is not None else None


def build_id() -> str:
    """Which kernels run here, for caches of choices made by timing them: the builds in use, each with its file's
    size and modification time (a rebuilt or reinstalled library is a new build), and the CPU's model name."""
    parts = []
    for lib in (_lib, _bf16):
        if lib is not None:
            stat = lib.path.stat()
            parts.append(f"{lib.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return ";".join([*parts, cpu_libraries.cpu_model()]) if parts else "numpy;" + cpu_libraries.cpu_model()


def _select(name: str | None) -> str | None:
    """Use the build `name` ("avx512", "avx2", or None for none) from now on; returns the previous one. For tests
    and benchmarks; raises ValueError when this CPU or install lacks that build."""
    global _lib
    previous = isa()
    if name is None:
        _lib = None
        return previous
    lib = cpu_libraries.load(name) if name in FP32_BUILDS else None
    if lib is None:
        have = cpu_libraries.supported_isas()
        raise ValueError(f"native kernels: build {name!r} is not available here (have {have})")
    _lib = lib
    return previous


def _need() -> Library:
    if _lib is None:
        raise RuntimeError("native kernels are not available (see cpu_native.available()); use the numpy kernels")
    return _lib


def _need_bf16() -> Library:
    _need()
    if _bf16 is None:
        raise RuntimeError("bfloat16 kernels are not available (see cpu_native.bf16_available()); pack float32")
    return _bf16


def _bf16_bits(a: np.ndarray) -> np.ndarray:
    """The bfloat16 bit patterns (uint16) of float32 `a`, rounded to nearest even (as vcvtne2ps2bf16); NaN stays
    a quiet NaN."""
    a = np.ascontiguousarray(a, np.float32)
    u = a.view(np.uint32)
    bits = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():
        bits[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return bits


def round_bf16(a: np.ndarray) -> np.ndarray:
    """float32 `a` rounded to the nearest bfloat16 (ties to even), as float32: what the bf16 kernels multiply."""
    return (_bf16_bits(a).astype(np.uint32) << 16).view(np.float32)


class PackedWeight:
    """A right operand packed for the kernels: column panels `nr` wide, K-major inside a panel, N zero-padded.
    `k`, `n` are the logical sizes; `data` is what the kernels read, kept alive here: float32 (npanels, k, nr), or
    for dtype "bfloat16" the uint16 bit patterns (npanels, kpad / 2, nr, 2), pairs (k, k + 1) interleaved, K padded
    to even (per tap for a convolution weight, so that pairs never straddle taps)."""

    __slots__ = ("data", "dtype", "k", "n", "nr")

    def __init__(self, data: np.ndarray, k: int, n: int, nr: int, dtype: str = "float32") -> None:
        self.data, self.k, self.n, self.nr, self.dtype = data, k, n, nr, dtype

    @property
    def kpad(self) -> int:
        """K as stored: k for float32; for bfloat16, k with each tap's channels padded to even."""
        return self.k if self.dtype == "float32" else 2 * self.data.shape[1]

    def __repr__(self) -> str:
        return f"PackedWeight(k={self.k}, n={self.n}, nr={self.nr}, dtype={self.dtype})"


def _pack(op: str, w_tcn: np.ndarray, dtype: str) -> PackedWeight:
    """Pack w (taps, C, N): K = taps * C rows, each tap's C padded to even for bfloat16."""
    if dtype not in DTYPES:
        raise ValueError(f"{op}: dtype {dtype!r}; expected one of {DTYPES}")
    taps, c, n = w_tcn.shape
    if dtype == "float32":
        nr = _need().nr
        panels = -(-n // nr)
        padded = np.zeros((taps * c, panels * nr), np.float32)
        padded[:, :n] = w_tcn.reshape(taps * c, n)
        data = np.ascontiguousarray(padded.reshape(taps * c, panels, nr).transpose(1, 0, 2))  # (panels, K, nr)
        return PackedWeight(data, taps * c, n, nr)
    nr = _need_bf16().bf16_nr
    panels, cp = -(-n // nr), c + c % 2
    padded = np.zeros((taps, cp, panels * nr), np.float32)
    padded[:, :c, :n] = w_tcn
    bits = _bf16_bits(padded).reshape(taps * cp // 2, 2, panels, nr)
    data = np.ascontiguousarray(bits.transpose(2, 0, 3, 1))  # (panels, K/2, nr, 2)
    return PackedWeight(data, taps * c, n, nr, dtype)


def pack_weight(w_kn: np.ndarray, dtype: str = "float32") -> PackedWeight:
    """Pack w (K, N), the right operand of out = a @ w, into the loaded build's panels; dtype="bfloat16" rounds
    it to bf16 (nearest even) for the AVX512-BF16 kernels (see bf16_available())."""
    w = np.asarray(w_kn)
    if w.ndim != 2:
        raise ValueError(f"pack_weight: expected a (K, N) matrix, got shape {w.shape}")
    return _pack("pack_weight", w[None], dtype)


def pack_conv_weight(w: np.ndarray, dtype: str = "float32") -> PackedWeight:
    """Pack a PyTorch conv weight (OC, IC, KH, KW), groups=1, with K ordered (kh, kw, ic) to match NHWC input;
    dtype="bfloat16" as in pack_weight, each tap's IC padded to even."""
    w = np.asarray(w)
    if w.ndim != 4:
        raise ValueError(f"pack_conv_weight: expected (OC, IC, KH, KW), got shape {w.shape}")
    oc, ic, kh, kw = w.shape
    return _pack("pack_conv_weight", w.transpose(2, 3, 1, 0).reshape(kh * kw, ic, oc), dtype)  # (taps, IC, OC)


def _check(name: str, arr: Any, shape: tuple[int, ...] | None = None) -> np.ndarray:
    if not isinstance(arr, np.ndarray) or arr.dtype != np.float32:
        raise ValueError(f"{name}: expected a float32 numpy array, got {getattr(arr, 'dtype', type(arr).__name__)}")
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name}: expected a C-contiguous array (np.ascontiguousarray)")
    if shape is not None and arr.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {arr.shape}")
    return arr


def _epilogue(op: str, n: int, rows_shape: tuple[int, ...], bias: Any, residual: Any, act: str) -> tuple[Any, ...]:
    if act not in _ACT:
        raise ValueError(f"{op}: unknown activation {act!r}; expected one of {ACTIVATIONS}")
    b = None if bias is None else _check(f"{op} bias", bias, (n,)).ctypes.data
    r = None if residual is None else _check(f"{op} residual", residual, rows_shape).ctypes.data
    return b, r, _ACT[act]


def _span(op: str, span: tuple[int, int] | None, total: int) -> tuple[int, int]:
    if span is None:
        return 0, total
    start, stop = span
    if not 0 <= start <= stop <= total:
        raise ValueError(f"{op}: span {span} outside [0, {total}]")
    return int(start), int(stop)


def _output(op: str, out: Any, shape: tuple[int, ...]) -> np.ndarray:
    return np.empty(shape, np.float32) if out is None else _check(f"{op} out", out, shape)


def _rows(op: str, name: str, arr: Any, shape: tuple[int, int]) -> np.ndarray:
    """A float32 (M, N) matrix whose rows are contiguous, with any row stride (a column slice of a wider one)."""
    if not isinstance(arr, np.ndarray) or arr.dtype != np.float32 or arr.shape != shape:
        got = f"{getattr(arr, 'dtype', type(arr).__name__)} {getattr(arr, 'shape', '')}"
        raise ValueError(f"{op}: {name} must be a float32 array of shape {shape}, got {got}")
    if shape[0] > 1 and shape[1] > 0 and (arr.strides[1] != 4 or arr.strides[0] % 4 or arr.strides[0] < 4 * shape[1]):
        raise ValueError(f"{op}: {name} needs contiguous rows (strides {arr.strides}); pass np.ascontiguousarray")
    if shape[0] == 1 and shape[1] > 1 and arr.strides[1] != 4:
        raise ValueError(f"{op}: {name} needs contiguous rows (strides {arr.strides}); pass np.ascontiguousarray")
    return arr


def _row_stride(arr: np.ndarray) -> int:
    return arr.strides[0] // 4 if arr.shape[0] > 1 else arr.shape[1]


def rows_view(op: str, name: str, arr: Any, shape: tuple[int, int]) -> np.ndarray:
    """`arr` checked as a float32 (M, N) matrix with contiguous rows and any row stride (see _rows)."""
    return _rows(op, name, arr, shape)


def row_stride(arr: np.ndarray) -> int:
    """The row stride of such a matrix, in elements."""
    return _row_stride(arr)


def gemm(
    a: np.ndarray,
    packed: PackedWeight,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    act: str = "none",
    out: np.ndarray | None = None,
    rows: tuple[int, int] | None = None,
) -> np.ndarray:
    """out[M, N] = act(a[M, K] @ W + bias[N] + residual[M, N]). `a`, `residual` and `out` may have a row stride
    (a[:, :K] of a wider array; lanes that split N pass their column slice of one output and residual); `rows=(r0,
    r1)` computes only those rows of out. A bfloat16 weight rounds `a` to bf16 on the fly."""
    _, fn = _kernel("gemm", packed)
    if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.ndim != 2:
        raise ValueError(f"gemm: expected a float32 (M, K) array, got {getattr(a, 'dtype', type(a).__name__)}")
    m, k = a.shape
    if k != packed.k:
        raise ValueError(f"gemm: a has K={k}, the packed weight K={packed.k}")
    if packed.kpad not in (k, k + k % 2):
        raise ValueError(f"gemm: a bfloat16 weight packed per tap (K={packed.kpad} padded); use pack_weight")
    if m > 0 and (a.strides[1] != 4 or a.strides[0] % 4 or a.strides[0] < 4 * k):
        raise ValueError(f"gemm: a needs contiguous rows (strides {a.strides}); pass np.ascontiguousarray(a)")
    n = packed.n
    b, _, code = _epilogue("gemm", n, (m, n), bias, None, act)
    res = None if residual is None else _rows("gemm", "residual", residual, (m, n))
    out = np.empty((m, n), np.float32) if out is None else _rows("gemm", "out", out, (m, n))
    r0, r1 = _span("gemm", rows, m)
    ldr, res_ptr = (0, None) if res is None else (_row_stride(res), res.ctypes.data)
    if r1 > r0 and fn(a.ctypes.data, a.strides[0] // 4, k, packed.data.ctypes.data, n, b, res_ptr, ldr,
                      out.ctypes.data, _row_stride(out), code, r0, r1):  # fmt: skip
        raise MemoryError("gemm: out of memory for the bf16 rows")
    return out


def layer_norm(
    x: np.ndarray,
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    eps: float,
    residual: np.ndarray | None = None,
    out: np.ndarray | None = None,
    rows: tuple[int, int] | None = None,
) -> np.ndarray:
    """PyTorch's LayerNorm over the last dim of (x + residual), rows independent: out[..., N] = (s - mean) /
    sqrt(biased var + eps) * weight + bias, s = x + residual (sk_norm.c). weight / bias (N,) or None; `out` may be x
    or residual (in place); `rows=(r0, r1)` computes only those rows of the flattened (M, N)."""
    lib = _need()
    _check("layer_norm x", x)
    if x.ndim < 1:
        raise ValueError("layer_norm: x needs a last dimension")
    n = x.shape[-1]
    m = x.size // n if n else 0
    w = None if weight is None else _check("layer_norm weight", weight, (n,)).ctypes.data
    b = None if bias is None else _check("layer_norm bias", bias, (n,)).ctypes.data
    r = None if residual is None else _check("layer_norm residual", residual, x.shape).ctypes.data
    out = _output("layer_norm", out, x.shape)
    r0, r1 = _span("layer_norm", rows, m)
    if r1 > r0:
        lib.layernorm(x.ctypes.data, r, out.ctypes.data, n, w, b, float(eps), r0, r1)
    return out


def _kernel(op: str, packed: PackedWeight) -> tuple[Library, Any]:
    """The library and its gemm / conv2d function for this packed weight's dtype."""
    if packed.dtype == "bfloat16":
        lib = _need_bf16()
        fn = lib.gemm_bf16 if op == "gemm" else lib.conv2d_bf16
        nr = lib.bf16_nr
    else:
        lib = _need()
        fn, nr = (lib.gemm if op == "gemm" else lib.conv2d), lib.nr
    if packed.nr != nr:
        raise ValueError(f"{op}: weight packed for panels of {packed.nr}, the loaded build ({lib.name}) uses {nr}")
    return lib, fn


# the convolution and pooling wrappers, last: cpu_native_conv takes the helpers above from this module
from serve.backend.cpu_native_conv import (  # noqa: E402
    conv2d_nhwc,
    depthwise_nhwc,
    max_pool_nhwc,
    pack_winograd_weight,
    winograd_nhwc,
    winograd_tile,
    winograd_tiles,
)
