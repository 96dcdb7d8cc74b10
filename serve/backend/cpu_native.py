"""Native CPU kernels (serve/backend/native/serve_kernels.c) through ctypes: implicit-GEMM convolution in NHWC, GEMM
on packed weights and depthwise convolution, each with its epilogue fused: out = act(acc + bias + residual); and
LayerNorm with the residual add before it (sk_norm.c).

The C source is built at install into two shared libraries, AVX-512 and AVX2; the one this CPU runs is picked here at
import from /proc/cpuinfo (AVX-512F+BW+DQ+VL, else AVX2+FMA, else none). `SERVE_NATIVE=0` turns them off (A/B
benchmarks). A third build, AVX-512 with AVX512-BF16, is loaded besides when the CPU has avx512_bf16: it runs
the products of weights packed with dtype="bfloat16" (`bf16_available()`), the fp32 input rounded to bf16 on the
fly, fp32 accumulation (vdpbf16ps), the fp32 epilogue and an fp32 output; where the CPU has AMX, the fourth
build (the same plus sk_amx.c's tile path) replaces it once cpu_libraries says it passed its self-check here
(`bf16_engine()` names which runs). Nothing here raises at import:
`available()` says whether the kernels can be called, and callers fall back to the numpy kernels (cpu_conv) when
it is False.

The wrappers stay thin because lanes (cpu_threads.parallel) call them from several Python threads at once: ctypes
releases the GIL for the call, and `rows`/`pixels` give each lane its own span of the output (any span, even one
that splits an image row or crosses samples). Arrays are float32 and C-contiguous; bad input raises ValueError.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any

import numpy as np

from serve.backend import cpu_libraries

__all__ = ["ACTIVATIONS", "PackedWeight", "available", "bf16_available", "bf16_engine", "bf16_library", "conv2d_nhwc",
           "depthwise_nhwc", "gemm", "isa", "layer_norm", "max_pool_nhwc", "pack_conv_weight", "pack_weight",
           "pack_winograd_weight", "round_bf16", "winograd_nhwc"]  # fmt: skip

ACTIVATIONS = ("none", "relu", "relu6", "gelu", "gelu_tanh", "silu", "hardswish", "sigmoid")
_ACT = {name: i for i, name in enumerate(ACTIVATIONS)}
_LIBS = {"avx512": "_sk_avx512", "avx2": "_sk_avx2"}
_BF16, _AMX = "avx512bf16", "amx"
_FILES = {**_LIBS, _BF16: "_sk_avx512bf16", _AMX: "_sk_amx"}
DTYPES = ("float32", "bfloat16")
_I64, _PTR, _INT = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
_SIGNATURES = {
    "sk_gemm": [_PTR, _I64, _I64, _PTR, _I64, _PTR, _PTR, _I64, _PTR, _I64, _INT, _I64, _I64],
    "sk_conv2d": [_PTR] + [_I64] * 4 + [_PTR] + [_I64] * 11 + [_PTR, _PTR, _PTR, _INT, _I64, _I64],
    "sk_depthwise": [_PTR] + [_I64] * 4 + [_PTR] + [_I64] * 10 + [_PTR, _PTR, _PTR, _INT, _I64, _I64],
    "sk_maxpool": [_PTR] + [_I64] * 12 + [_PTR, _I64, _I64],
    "sk_winograd": [_PTR] + [_I64] * 4 + [_PTR] + [_I64] * 5 + [_PTR, _PTR, _PTR, _INT, _I64, _I64, _INT],
    "sk_attention": [_PTR] * 6 + [_I64] * 5 + [ctypes.c_float, _INT, _I64, _I64],
    "sk_layernorm": [_PTR] * 3 + [_I64] + [_PTR] * 2 + [ctypes.c_float, _I64, _I64],
    "sk_paged_decode": [_PTR] * 4 + [_I64, _PTR, _PTR] + [_I64] * 4 + [ctypes.c_float] * 2 + [_I64] * 3,
}
_BF16_SIGNATURES = {"sk_gemm_bf16": _SIGNATURES["sk_gemm"], "sk_conv2d_bf16": _SIGNATURES["sk_conv2d"]}


class _Lib:
    """One loaded kernel library: its functions with argtypes set, and its panel width (fp32, and bf16 for the
    bf16 build)."""

    def __init__(self, name: str, path: Path) -> None:
        self.name, self.path = name, path
        self.dll = ctypes.CDLL(str(path))
        signatures = {**_SIGNATURES, **(_BF16_SIGNATURES if name in (_BF16, _AMX) else {})}
        for fn_name, argtypes in signatures.items():
            fn = getattr(self.dll, fn_name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
        self.gemm, self.conv2d, self.depthwise = self.dll.sk_gemm, self.dll.sk_conv2d, self.dll.sk_depthwise
        self.maxpool, self.attention, self.winograd = self.dll.sk_maxpool, self.dll.sk_attention, self.dll.sk_winograd
        self.layernorm, self.paged_decode = self.dll.sk_layernorm, self.dll.sk_paged_decode
        self.nr: int = self.dll.sk_nr()
        if name in (_BF16, _AMX):
            self.gemm_bf16, self.conv2d_bf16 = self.dll.sk_gemm_bf16, self.dll.sk_conv2d_bf16
            self.bf16_nr: int = self.dll.sk_bf16_nr()


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _supported_isas() -> list[str]:
    """The kernel builds this CPU runs, best first."""
    flags = _cpu_flags()
    found = []
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl", "fma"} <= flags:
        found.append("avx512")
    if {"avx2", "fma"} <= flags:
        found.append("avx2")
    return found


def _library_path(name: str) -> Path | None:
    here = Path(__file__).parent / "native"
    matches = sorted(here.glob(_FILES[name] + ".*so")) if here.is_dir() else []
    return matches[0] if matches else None


def _load(name: str) -> _Lib | None:
    path = _library_path(name)
    if path is None or name not in _supported_isas():
        return None
    try:
        return _Lib(name, path)
    except (OSError, AttributeError):
        return None


def _first_library() -> _Lib | None:
    if os.environ.get("SERVE_NATIVE", "1").strip() == "0":
        return None
    for name in _supported_isas():
        lib = _load(name)
        if lib is not None:
            return lib
    return None


def _bf16_library() -> _Lib | None:
    """The bf16 build, when native kernels are on, the CPU has avx512_bf16 and the build is installed: the AMX one
    where cpu_libraries.choose_amx says it proved itself here, else AVX512-BF16."""
    if os.environ.get("SERVE_NATIVE", "1").strip() == "0" or "avx512" not in _supported_isas():
        return None
    if "avx512_bf16" not in _cpu_flags():
        return None
    amx = _library_path(_AMX)
    if cpu_libraries.choose_amx(amx, _cpu_flags()) and amx is not None:
        try:
            return _Lib(_AMX, amx)
        except (OSError, AttributeError):
            pass
    path = _library_path(_BF16)
    if path is None:
        return None
    try:
        return _Lib(_BF16, path)
    except (OSError, AttributeError):
        return None


_lib: _Lib | None = _first_library()
_bf16: _Lib | None = _bf16_library()


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
    return "amx" if _bf16.name == _AMX else "avx512_bf16"


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
    return ";".join([*parts, _cpu_model()]) if parts else "numpy;" + _cpu_model()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def _select(name: str | None) -> str | None:
    """Use the build `name` ("avx512", "avx2", or None for none) from now on; returns the previous one. For tests
    and benchmarks; raises ValueError when this CPU or install lacks that build."""
    global _lib
    previous = isa()
    if name is None:
        _lib = None
        return previous
    lib = _load(name) if name in _LIBS else None
    if lib is None:
        raise ValueError(f"native kernels: build {name!r} is not available here (have {_supported_isas()})")
    _lib = lib
    return previous


def _need() -> _Lib:
    if _lib is None:
        raise RuntimeError("native kernels are not available (see cpu_native.available()); use the numpy kernels")
    return _lib


def _need_bf16() -> _Lib:
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


def _kernel(op: str, packed: PackedWeight) -> tuple[_Lib, Any]:
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


def _conv_geometry(op: str, x: Any, kernel: Any, stride: Any, padding: Any, dilation: Any) -> tuple[int, ...]:
    _check(f"{op} x", x)
    if x.ndim != 4:
        raise ValueError(f"{op}: expected x (N, H, W, C), got shape {x.shape}")
    try:
        (kh, kw), (sh, sw), (dh, dw) = (tuple(int(v) for v in p) for p in (kernel, stride, dilation))
        pt, pb, pl, pr = (int(v) for v in padding)
    except (TypeError, ValueError):
        raise ValueError(f"{op}: kernel/stride/dilation are (h, w) pairs, padding (top, bottom, left, right)") from None
    if min(kh, kw, sh, sw, dh, dw) < 1 or min(pt, pb, pl, pr) < 0:
        raise ValueError(f"{op}: bad geometry kernel={kernel} stride={stride} padding={padding} dilation={dilation}")
    h, w = x.shape[1:3]
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise ValueError(f"{op}: output would be empty for input {x.shape} and kernel {kernel}")
    return kh, kw, sh, sw, pt, pl, dh, dw, oh, ow


def conv2d_nhwc(
    x: np.ndarray,
    packed: PackedWeight,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int, int, int],
    dilation: tuple[int, int],
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    act: str = "none",
    out: np.ndarray | None = None,
    pixels: tuple[int, int] | None = None,
) -> np.ndarray:
    """NHWC convolution (groups=1) of x (N, H, W, C) by a pack_conv_weight: out (N, OH, OW, OC) =
    act(conv + bias + residual). `pixels=(p0, p1)` computes only those of the flattened N*OH*OW output pixels.
    A bfloat16 weight rounds x to bf16 on the fly (the input rows this call's pixels read)."""
    _, fn = _kernel("conv2d_nhwc", packed)
    geo = _conv_geometry("conv2d_nhwc", x, kernel, stride, padding, dilation)
    kh, kw, *_, oh, ow = geo
    nb, h, w, c = x.shape
    if packed.k != kh * kw * c:
        raise ValueError(f"conv2d_nhwc: packed K={packed.k} does not match kernel {kh}x{kw} x {c} input channels")
    if packed.dtype == "bfloat16" and packed.kpad != kh * kw * (c + c % 2):
        raise ValueError("conv2d_nhwc: a bfloat16 weight packed without per-tap padding; use pack_conv_weight")
    oc = packed.n
    shape = (nb, oh, ow, oc)
    b, r, code = _epilogue("conv2d_nhwc", oc, shape, bias, residual, act)
    out = _output("conv2d_nhwc", out, shape)
    p0, p1 = _span("conv2d_nhwc", pixels, nb * oh * ow)
    if p1 > p0 and fn(x.ctypes.data, nb, h, w, c, packed.data.ctypes.data, oc, *geo, b, r, out.ctypes.data, code,
                      p0, p1):  # fmt: skip
        raise MemoryError("conv2d_nhwc: out of memory for the tap pointers / bf16 input")
    return out


# Winograd F(m x m, 3x3): U = G g G^T turns each 3x3 filter into the (m + 2) x (m + 2) one that the transformed
# input tiles multiply (Lavin & Gray's matrices; the C kernel holds B^T and A^T)
_WINO_G = {
    2: np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]]),
    4: np.array([[1 / 4, 0.0, 0.0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                 [1 / 24, -1 / 12, 1 / 6], [0.0, 0.0, 1.0]]),
}  # fmt: skip


def pack_winograd_weight(w: np.ndarray, m: int = 2) -> PackedWeight:
    """Transform a 3x3 conv weight (OC, IC, 3, 3) for winograd_nhwc's F(m x m, 3x3) (m = 2 or 4) and pack its
    (m + 2)^2 (IC, OC) matrices in panels: data ((m + 2)^2, panels, IC, nr), computed in float64, rounded once."""
    w = np.asarray(w)
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        raise ValueError(f"pack_winograd_weight: expected a 3x3 conv weight (OC, IC, 3, 3), got shape {w.shape}")
    if m not in _WINO_G:
        raise ValueError(f"pack_winograd_weight: output tile m={m}; expected 2 or 4")
    g = _WINO_G[m]
    u = np.einsum("ai,ocij,bj->abco", g, w.astype(np.float64), g).astype(np.float32)  # (a, a, IC, OC)
    packs = [_pack("pack_winograd_weight", u[i, j][None], "float32") for i in range(m + 2) for j in range(m + 2)]
    return PackedWeight(np.stack([p.data for p in packs]), w.shape[1], w.shape[0], packs[0].nr)


def winograd_tile(packed: PackedWeight) -> int:
    """The output tile m of a pack_winograd_weight: 2 or 4."""
    return {16: 2, 36: 4}.get(packed.data.shape[0], 0) if packed.data.ndim == 4 else 0


def winograd_nhwc(
    x: np.ndarray,
    packed: PackedWeight,
    padding: tuple[int, int, int, int],
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    act: str = "none",
    out: np.ndarray | None = None,
    tiles: tuple[int, int] | None = None,
) -> np.ndarray:
    """3x3 stride-1 NHWC convolution of x (N, H, W, C) by Winograd F(m x m, 3x3), with pack_winograd_weight's
    weight (its m): out (N, OH, OW, OC) = act(conv + bias + residual). `tiles=(t0, t1)` computes only those
    m x m output blocks of the flattened (N, ceil(OH / m), ceil(OW / m)) (`winograd_tiles` counts them)."""
    lib = _need()
    m = winograd_tile(packed)
    if packed.dtype != "float32" or not m or packed.nr != lib.nr:
        raise ValueError("winograd_nhwc: expected a weight from pack_winograd_weight for the loaded build")
    _, _, _, _, pt, pl, _, _, oh, ow = _conv_geometry("winograd_nhwc", x, (3, 3), (1, 1), padding, (1, 1))
    nb, h, w, c = x.shape
    if packed.k != c:
        raise ValueError(f"winograd_nhwc: the weight has {packed.k} input channels, x has {c}")
    oc = packed.n
    shape = (nb, oh, ow, oc)
    b, r, code = _epilogue("winograd_nhwc", oc, shape, bias, residual, act)
    out = _output("winograd_nhwc", out, shape)
    t0, t1 = _span("winograd_nhwc", tiles, winograd_tiles(nb, oh, ow, m))
    if t1 > t0 and lib.winograd(x.ctypes.data, nb, h, w, c, packed.data.ctypes.data, oc, pt, pl, oh, ow, b, r,
                                out.ctypes.data, code, t0, t1, m):  # fmt: skip
        raise MemoryError("winograd_nhwc: out of memory for the transformed tiles")
    return out


def winograd_tiles(nb: int, oh: int, ow: int, m: int = 2) -> int:
    """How many m x m output blocks winograd_nhwc splits an (nb, oh, ow) output into."""
    return nb * (-(-oh // m)) * (-(-ow // m))


def depthwise_nhwc(
    x: np.ndarray,
    w: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int, int, int],
    dilation: tuple[int, int],
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    act: str = "none",
    out: np.ndarray | None = None,
    pixels: tuple[int, int] | None = None,
) -> np.ndarray:
    """Depthwise NHWC convolution (groups = C = OC) of x (N, H, W, C) by w (C, 1, KH, KW), epilogue fused."""
    lib = _need()
    geo = _conv_geometry("depthwise_nhwc", x, kernel, stride, padding, dilation)
    kh, kw, *_, oh, ow = geo
    nb, h, wd, c = x.shape
    _check("depthwise_nhwc w", w, (c, 1, kh, kw))
    taps = np.ascontiguousarray(w.reshape(c, kh * kw).T)  # (KH*KW, C): a tap's weights contiguous along channels
    shape = (nb, oh, ow, c)
    b, r, code = _epilogue("depthwise_nhwc", c, shape, bias, residual, act)
    out = _output("depthwise_nhwc", out, shape)
    p0, p1 = _span("depthwise_nhwc", pixels, nb * oh * ow)
    if p1 > p0:
        lib.depthwise(x.ctypes.data, nb, h, wd, c, taps.ctypes.data, *geo, b, r, out.ctypes.data, code, p0, p1)
    return out


def _pair(op: str, name: str, v: Any) -> tuple[int, int]:
    try:
        t = (int(v), int(v)) if np.ndim(v) == 0 else tuple(int(i) for i in v)
    except (TypeError, ValueError):
        t = ()
    if len(t) != 2:
        raise ValueError(f"{op}: {name} is an int or an (h, w) pair, got {v!r}")
    return t[0], t[1]


def max_pool_nhwc(
    x: np.ndarray,
    kernel: int | tuple[int, int],
    stride: int | tuple[int, int] | None,
    padding: int | tuple[int, ...],
    out: np.ndarray | None = None,
    pixels: tuple[int, int] | None = None,
) -> np.ndarray:
    """Max pooling of x (N, H, W, C) float32, PyTorch semantics: padding counts as -inf, dilation 1, floor mode.
    kernel / stride are ints or (h, w) pairs (stride None = kernel); padding an int, (h, w), or (top, bottom, left,
    right), each smaller than the kernel. out (N, OH, OW, C); `pixels=(p0, p1)` as in conv2d_nhwc. A NaN in a
    window gives NaN, as in PyTorch."""
    lib = _need()
    op = "max_pool_nhwc"
    kh, kw = _pair(op, "kernel", kernel)
    sh, sw = _pair(op, "stride", kernel if stride is None else stride)
    pads: tuple[int, ...] = ()
    if np.size(padding) in (1, 2):
        ph, pw = _pair(op, "padding", padding)
        pads = (ph, ph, pw, pw)
    elif np.size(padding) == 4:
        pads = tuple(int(v) for v in np.ravel(padding))
    if len(pads) != 4:
        raise ValueError(f"{op}: padding is an int, (h, w) or (top, bottom, left, right), got {padding!r}")
    if max(pads[:2]) >= kh or max(pads[2:]) >= kw:
        raise ValueError(f"{op}: padding {padding} must be smaller than the kernel {kernel}")
    _, _, sh, sw, pt, pl, _, _, oh, ow = _conv_geometry(op, x, (kh, kw), (sh, sw), pads, (1, 1))
    nb, h, w, c = x.shape
    out = _output(op, out, (nb, oh, ow, c))
    p0, p1 = _span(op, pixels, nb * oh * ow)
    if p1 > p0 and c > 0:
        lib.maxpool(x.ctypes.data, nb, h, w, c, kh, kw, sh, sw, pt, pl, oh, ow, out.ctypes.data, p0, p1)
    return out
