"""Fused attention on the CPU: softmax(q @ k^T * scale + mask) @ v in one native call per span of (batch, head)
pairs, for the backend's `attention` primitive (scaled_dot_product_attention and multi-head attention use it when
nothing records a graph and the probabilities are not asked for).

Why fused: the unfused path makes the (L, S) scores whole for every head, writes them, reads them back for the
softmax and again for the product with v, and runs each head's small products as a separate BLAS call (~25
GFLOP/s at L = S = 128, E = 32). The native kernel (serve_kernels.c `attention`) packs k^T and v once per head and
takes MR query rows at a time through their scores, softmax and product with v while the rows stay in L1.

`attention` returns None where the kernel does not apply (no native build, not float32, more than 4 dims,
batch dims that broadcast between q, k and v, fewer than MIN_QUERIES query rows, where one BLAS product per head
is as quick): the caller then runs the three steps. A bool mask becomes an additive one (True -> 0, False ->
-inf), as PyTorch's math path does.

`dtype="bfloat16"` runs the two products in bf16 (the bf16 build's `attention_bf16`: q, k and v rounded to bf16
where they enter the products, the softmax probabilities rounded to bf16 before the product with v, fp32
accumulation, scale, mask and softmax in fp32, fp32 out; vdpbf16ps, or AMX tiles where that build passed its
self-check). Only the plan asks for it (serve.inference.attention, when optimize(..., dtype="bfloat16") and its
timing picked it); eager attention stays float32. None where there is no bf16 build.

`ROUTE` lets a plan choose for the attention its modules compute through scaled_dot_product_attention (the backend's
`attention` primitive, ops_cpu.attention, asks it first): set only while a bfloat16 plan runs (serve.inference.
optimized), in the calling context, so eager calls and other threads never see it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

import numpy as np

from serve.backend import cpu_native, cpu_threads

__all__ = ["MIN_QUERIES", "ROUTE", "attention"]

MIN_QUERIES = 4  # a decoder's one new query row: packing k per head costs as much as the product
# attention(q, k, v, mask, is_bool, safe, scale) for ops_cpu.attention while a bfloat16 plan runs (the docstring)
ROUTE: contextvars.ContextVar[Callable[..., np.ndarray | None] | None] = contextvars.ContextVar(
    "serve_attention_route", default=None
)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, is_bool: bool, safe: bool,
              scale: float, out: np.ndarray | None = None, dtype: str = "float32") -> np.ndarray | None:  # fmt: skip
    """softmax(q @ k^T * scale + mask) @ v over the last two dims, or None where the fused kernel does not apply.
    `out` (q.shape[:-1] + (v's last dim,), float32, contiguous rows, any strides in whole floats) takes the result
    in place: a (N, heads, L, hd) view of a (N, L, heads * hd) array lets the caller skip the heads' merge copy.
    `dtype` is the products' dtype: "float32", or "bfloat16" (the module docstring)."""
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"attention: dtype must be 'float32' or 'bfloat16', got {dtype!r}")
    fn = cpu_native.attention_kernel() if dtype == "float32" else cpu_native.attention_bf16_kernel()
    if fn is None or not _applies(q, k, v):
        return None
    q4, k4, v4 = _as4d(q), _as4d(k), _as4d(v)
    b, h, l, e = q4.shape
    s, ev = k4.shape[2], v4.shape[3]
    m4 = _mask4d(mask, is_bool, q.shape[:-2] + (l, s))
    if mask is not None and m4 is None:
        return None
    if out is None:
        out = np.empty(q.shape[:-1] + (ev,), np.float32)
    elif out.dtype != np.float32 or out.shape != q.shape[:-1] + (ev,) or not _applies(out, out, out):
        raise ValueError(f"attention: out must be float32 {q.shape[:-1] + (ev,)} with rows contiguous, got "
                         f"{out.dtype} {out.shape} strides {out.strides}")  # fmt: skip
    o4 = _as4d(out)
    strides = [st // 4 for a in (q4, k4, v4, o4) for st in a.strides[:3]]
    strides += [0, 0, 0, 0] if m4 is None else [st // 4 for st in m4.strides]
    st = np.asarray(strides, np.int64)
    mask_ptr = None if m4 is None else m4.ctypes.data

    def part(i0: int, i1: int) -> None:
        if fn(q4.ctypes.data, k4.ctypes.data, v4.ctypes.data, o4.ctypes.data, mask_ptr, st.ctypes.data, h, l, s, e,
              ev, scale, int(safe), i0, i1):  # fmt: skip
            raise MemoryError("attention: out of memory for the packed keys and values")

    pairs = b * h
    flops = 2 * l * s * (e + ev)
    cpu_threads.parallel(part, [(0, pairs)] if pairs * flops < (1 << 22) else cpu_threads.spans(pairs))
    return out


def _applies(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> bool:
    arrays = (q, k, v)
    if any(a.dtype != np.float32 or a.ndim not in (2, 3, 4) or a.ndim != q.ndim for a in arrays):
        return False
    if q.shape[:-2] != k.shape[:-2] or q.shape[:-2] != v.shape[:-2] or q.shape[-2] < MIN_QUERIES:
        return False
    if 0 in q.shape or 0 in k.shape or 0 in v.shape:
        return False
    # rows contiguous, strides whole floats
    return all(a.strides[-1] == 4 and all(st % 4 == 0 for st in a.strides) for a in arrays)


def _as4d(a: np.ndarray) -> np.ndarray:
    """(B, H, rows, cols) view: a 3-D array is (B, 1, rows, cols), a 2-D one (1, 1, rows, cols)."""
    return a if a.ndim == 4 else a[:, None] if a.ndim == 3 else a[None, None]


def _mask4d(mask: np.ndarray | None, is_bool: bool, shape: tuple[int, ...]) -> np.ndarray | None:
    """The additive float32 mask broadcast to q's batch dims and (L, S), as a 4-D view; its column stride is 0 or
    one float (else it is copied)."""
    if mask is None:
        return None
    if is_bool:
        add = np.where(mask, np.float32(0.0), np.float32(-np.inf))
    elif mask.dtype == np.float32:
        add = mask
    else:
        return None
    try:
        full = np.broadcast_to(add, shape)
    except ValueError:
        return None
    m4 = _as4d(full)
    if m4.strides[3] not in (0, 4) or any(st % 4 for st in m4.strides):
        m4 = np.ascontiguousarray(m4)
    return m4
