"""Native CPU kernels (serve/backend/native/serve_kernels.c) through ctypes: implicit-GEMM convolution in NHWC, GEMM
on packed weights and depthwise convolution, each with its epilogue fused: out = act(acc + bias + residual).

The C source is built at install into two shared libraries, AVX-512 and AVX2; the one this CPU runs is picked here at
import from /proc/cpuinfo (AVX-512F+BW+DQ+VL, else AVX2+FMA, else none). `SERVE_NATIVE=0` turns them off (A/B
benchmarks). Nothing here raises at import: `available()` says whether the kernels can be called, and callers fall
back to the numpy kernels (cpu_conv) when it is False.

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

__all__ = ["ACTIVATIONS", "PackedWeight", "available", "conv2d_nhwc", "depthwise_nhwc", "gemm", "isa",
           "pack_conv_weight", "pack_weight"]  # fmt: skip

ACTIVATIONS = ("none", "relu", "relu6", "gelu", "gelu_tanh", "silu", "hardswish", "sigmoid")
_ACT = {name: i for i, name in enumerate(ACTIVATIONS)}
_LIBS = {"avx512": "_sk_avx512", "avx2": "_sk_avx2"}
_I64, _PTR, _INT = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
_SIGNATURES = {
    "sk_gemm": [_PTR, _I64, _I64, _PTR, _I64, _PTR, _PTR, _PTR, _INT, _I64, _I64],
    "sk_conv2d": [_PTR] + [_I64] * 4 + [_PTR] + [_I64] * 11 + [_PTR, _PTR, _PTR, _INT, _I64, _I64],
    "sk_depthwise": [_PTR] + [_I64] * 4 + [_PTR] + [_I64] * 10 + [_PTR, _PTR, _PTR, _INT, _I64, _I64],
}


class _Lib:
    """One loaded kernel library: its functions with argtypes set, and its panel width."""

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.dll = ctypes.CDLL(str(path))
        for fn_name, argtypes in _SIGNATURES.items():
            fn = getattr(self.dll, fn_name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
        self.gemm, self.conv2d, self.depthwise = self.dll.sk_gemm, self.dll.sk_conv2d, self.dll.sk_depthwise
        self.nr: int = self.dll.sk_nr()


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
    matches = sorted(here.glob(_LIBS[name] + ".*so")) if here.is_dir() else []
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


_lib: _Lib | None = _first_library()


def available() -> bool:
    """True when the native kernels are loaded and may be called."""
    return _lib is not None


def isa() -> str | None:
    """The loaded build: "avx512", "avx2", or None when the native kernels are off or missing."""
    return _lib.name if _lib is not None else None


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


class PackedWeight:
    """A right operand packed for the kernels: column panels `nr` wide, K-major inside a panel, N zero-padded.
    `k`, `n` are the logical sizes; `data` (npanels, k, nr) is what the kernels read, kept alive here."""

    __slots__ = ("data", "k", "n", "nr")

    def __init__(self, data: np.ndarray, k: int, n: int, nr: int) -> None:
        self.data, self.k, self.n, self.nr = data, k, n, nr

    def __repr__(self) -> str:
        return f"PackedWeight(k={self.k}, n={self.n}, nr={self.nr})"


def pack_weight(w_kn: np.ndarray) -> PackedWeight:
    """Pack w (K, N), the right operand of out = a @ w, into the loaded build's panels."""
    nr = _need().nr
    w = np.asarray(w_kn)
    if w.ndim != 2:
        raise ValueError(f"pack_weight: expected a (K, N) matrix, got shape {w.shape}")
    k, n = w.shape
    panels = -(-n // nr)
    padded = np.zeros((k, panels * nr), np.float32)
    padded[:, :n] = w
    data = np.ascontiguousarray(padded.reshape(k, panels, nr).transpose(1, 0, 2))  # (panels, K, nr)
    return PackedWeight(data, k, n, nr)


def pack_conv_weight(w: np.ndarray) -> PackedWeight:
    """Pack a PyTorch conv weight (OC, IC, KH, KW), groups=1, with K ordered (kh, kw, ic) to match NHWC input."""
    w = np.asarray(w)
    if w.ndim != 4:
        raise ValueError(f"pack_conv_weight: expected (OC, IC, KH, KW), got shape {w.shape}")
    oc = w.shape[0]
    return pack_weight(w.transpose(2, 3, 1, 0).reshape(-1, oc))  # (KH*KW*IC, OC)


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


def gemm(
    a: np.ndarray,
    packed: PackedWeight,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    act: str = "none",
    out: np.ndarray | None = None,
    rows: tuple[int, int] | None = None,
) -> np.ndarray:
    """out[M, N] = act(a[M, K] @ W + bias[N] + residual[M, N]). `a` may have a row stride (a[:, :K] of a wider
    array); `rows=(r0, r1)` computes only those rows of out."""
    lib = _need()
    if packed.nr != lib.nr:
        raise ValueError(f"gemm: weight packed for panels of {packed.nr}, the loaded build ({lib.name}) uses {lib.nr}")
    if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.ndim != 2:
        raise ValueError(f"gemm: expected a float32 (M, K) array, got {getattr(a, 'dtype', type(a).__name__)}")
    m, k = a.shape
    if k != packed.k:
        raise ValueError(f"gemm: a has K={k}, the packed weight K={packed.k}")
    if m > 0 and (a.strides[1] != 4 or a.strides[0] % 4 or a.strides[0] < 4 * k):
        raise ValueError(f"gemm: a needs contiguous rows (strides {a.strides}); pass np.ascontiguousarray(a)")
    n = packed.n
    b, r, code = _epilogue("gemm", n, (m, n), bias, residual, act)
    out = _output("gemm", out, (m, n))
    r0, r1 = _span("gemm", rows, m)
    if r1 > r0:
        lib.gemm(a.ctypes.data, a.strides[0] // 4, k, packed.data.ctypes.data, n, b, r, out.ctypes.data, code, r0, r1)
    return out


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
    act(conv + bias + residual). `pixels=(p0, p1)` computes only those of the flattened N*OH*OW output pixels."""
    lib = _need()
    geo = _conv_geometry("conv2d_nhwc", x, kernel, stride, padding, dilation)
    kh, kw, *_, oh, ow = geo
    nb, h, w, c = x.shape
    if packed.nr != lib.nr:
        raise ValueError(f"conv2d_nhwc: weight packed for panels of {packed.nr}, the loaded build uses {lib.nr}")
    if packed.k != kh * kw * c:
        raise ValueError(f"conv2d_nhwc: packed K={packed.k} does not match kernel {kh}x{kw} x {c} input channels")
    oc = packed.n
    shape = (nb, oh, ow, oc)
    b, r, code = _epilogue("conv2d_nhwc", oc, shape, bias, residual, act)
    out = _output("conv2d_nhwc", out, shape)
    p0, p1 = _span("conv2d_nhwc", pixels, nb * oh * ow)
    if p1 > p0 and lib.conv2d(x.ctypes.data, nb, h, w, c, packed.data.ctypes.data, oc, *geo, b, r,
                              out.ctypes.data, code, p0, p1):  # fmt: skip
        raise MemoryError("conv2d_nhwc: out of memory for the tap pointers")
    return out


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
