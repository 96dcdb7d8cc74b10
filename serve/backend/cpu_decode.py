"""The decoder block's elementwise kernels beside its products, native where serve's kernels are loaded: RMSNorm
(sk_norm.c, with the residual add before it), the gated MLP's act(gate) * up and rotary embeddings in place
(sk_glu.c). serve/zoo/decoders calls them per layer of every step.

Why: a Llama-style decode step is its products plus these, and in numpy each is several passes with temporaries
(RMSNorm: square, mean, sqrt, divide, multiply; SwiGLU: negate, exp, add, divide, multiply; RoPE: four products,
two sums and a concatenate per q and k). Each is one pass here: per call, 2 lanes, hidden 768, intermediate 2048,
12 + 4 heads of 64, numpy -> native: 16 rows RMSNorm 27 -> 14 us, SwiGLU 45 -> 19, RoPE 46 -> 15; 512 rows (a
prefill chunk) 404 -> 158, 3208 -> 872, 1226 -> 419; one row the same (Python's call is the cost). In a decode step
they are ~2% at 16 rows (bench/RESULTS.md); the prefill chunks gain most.

Each function returns None where the kernel is not loaded (SERVE_NATIVE=0, a CPU without AVX2, a build older than
the function) or the arrays are not float32 with contiguous rows: the caller then runs its numpy arithmetic, which
is the reference the tests hold these to. The kernels are bound here from `cpu_native.library()`, as cpu_int8 binds
its own. Rows split across lanes (cpu_threads) when the work is large enough to pay for the hand-off (a prefill
chunk); a decode step's rows run on the calling lane.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from serve.backend import cpu_native, cpu_threads

__all__ = ["glu", "rms_norm", "rope_"]

_PTR, _I64, _INT, _F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
_SIGNATURES: dict[str, list[Any]] = {
    "sk_rmsnorm": [_PTR, _I64, _PTR, _I64, _PTR, _I64, _PTR, _I64, _I64, _PTR, _F32, _I64, _I64],
    "sk_glu": [_PTR, _I64, _I64, _PTR, _I64, _INT, _I64, _I64],
    "sk_rope": [_PTR, _I64, _I64, _I64, _I64, _PTR, _PTR, _I64, _I64, _I64],
}
_GLU_ACTS = {"silu": 5, "gelu_tanh": 4}  # cpu_native.ACTIVATIONS' indices, as sk_glu.c names them
_BOUND: dict[tuple[int, str], Any] = {}


def _fn(name: str) -> Any:
    """The named kernel of the library cpu_native runs now (tests switch builds), or None."""
    dll = cpu_native.library()
    if dll is None or not hasattr(dll, name):
        return None
    key = (id(dll), name)
    if key not in _BOUND:
        fn = getattr(dll, name)
        fn.argtypes, fn.restype = _SIGNATURES[name], ctypes.c_int
        _BOUND[key] = fn
    return _BOUND[key]


def _rows_ok(a: np.ndarray) -> bool:
    """float32, 2-D, rows contiguous (any row stride); an empty array is fine (numpy gives it zero strides)."""
    if a.dtype != np.float32 or a.ndim != 2:
        return False
    return a.size == 0 or ((a.shape[1] <= 1 or a.strides[1] == 4) and a.strides[0] % 4 == 0)


def _ld(a: np.ndarray) -> int:
    return a.strides[0] // 4 if a.shape[0] > 1 else a.shape[1]


def _split(fn: Any, rows: int, nbytes: int) -> None:
    """fn(r0, r1) over the rows, split across lanes when `nbytes` of work pays for it."""
    cpu_threads.parallel(fn, cpu_threads.memory_spans(rows, nbytes))


def rms_norm(
    x: np.ndarray, weight: np.ndarray | None, eps: float, residual: np.ndarray | None = None,
    sum_out: np.ndarray | None = None, out: np.ndarray | None = None,
) -> np.ndarray | None:  # fmt: skip
    """s / sqrt(mean(s^2) + eps) * weight over the last axis of (T, N) rows, s = x + residual (or x); s is written
    to `sum_out` when given. transformers' LlamaRMSNorm in float32. None where the kernel does not apply."""
    fn = _fn("sk_rmsnorm")
    if fn is None or not _rows_ok(x) or (residual is not None and not _rows_ok(residual)):
        return None
    t, n = x.shape
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"rms_norm: residual {residual.shape} does not match x {x.shape}")
    w = None
    if weight is not None:
        if weight.dtype != np.float32 or weight.shape != (n,) or not weight.flags.c_contiguous:
            return None
        w = weight.ctypes.data
    out = np.empty((t, n), np.float32) if out is None else out
    for name, a in (("out", out), ("sum_out", sum_out)):
        if a is not None and (not _rows_ok(a) or a.shape != (t, n)):
            raise ValueError(f"rms_norm: {name} must be float32 ({t}, {n}) with contiguous rows")
    r = (None, 0) if residual is None else (residual.ctypes.data, _ld(residual))
    s = (None, 0) if sum_out is None else (sum_out.ctypes.data, _ld(sum_out))
    args = (x.ctypes.data, _ld(x), *r, *s, out.ctypes.data, _ld(out), n, w, float(eps))
    _split(lambda r0, r1: fn(*args, r0, r1), t, 8 * t * n)
    return out


def glu(gate_up: np.ndarray, act: str = "silu", out: np.ndarray | None = None) -> np.ndarray | None:
    """act(gate) * up from the fused (T, 2 * I) product, gate first: (T, I). act "silu" (SwiGLU) or "gelu_tanh"
    (GeGLU). None where the kernel does not apply."""
    fn = _fn("sk_glu")
    if act not in _GLU_ACTS:
        raise ValueError(f"glu: activation {act!r} is not supported; expected one of {sorted(_GLU_ACTS)}")
    if fn is None or not _rows_ok(gate_up) or gate_up.shape[1] % 2:
        return None
    t, half = gate_up.shape[0], gate_up.shape[1] // 2
    out = np.empty((t, half), np.float32) if out is None else out
    if not _rows_ok(out) or out.shape != (t, half):
        raise ValueError(f"glu: out must be float32 ({t}, {half}) with contiguous rows")
    args = (gate_up.ctypes.data, _ld(gate_up), half, out.ctypes.data, _ld(out), _GLU_ACTS[act])
    _split(lambda r0, r1: fn(*args, r0, r1), t, 12 * t * half)
    return out


def rope_(x: np.ndarray, heads: int, head_dim: int, rot: int, cos: np.ndarray, sin: np.ndarray) -> bool:
    """Rotate, in place, the first `heads` heads of each row of x ((T, >= heads * head_dim), contiguous rows): dims
    i and i + rot/2 (i < rot/2) of each head by cos[t, i], sin[t, i] ((T, rot/2) each, or (T, 1, rot/2)),
    transformers' rotate_half. False (x untouched) where the kernel does not apply."""
    fn = _fn("sk_rope")
    if fn is None or not _rows_ok(x) or x.shape[1] < heads * head_dim or rot % 2 or not 0 <= rot <= head_dim:
        return False
    t = x.shape[0]
    if t == 0:
        return True
    cos, sin = cos.reshape(t, -1), sin.reshape(t, -1)  # (T, rot/2)
    if cos.shape != (t, rot // 2) or sin.shape != cos.shape or cos.dtype != np.float32 or sin.dtype != np.float32:
        return False
    cos, sin = np.ascontiguousarray(cos), np.ascontiguousarray(sin)
    args = (x.ctypes.data, _ld(x), heads, head_dim, rot, cos.ctypes.data, sin.ctypes.data, rot // 2)
    _split(lambda r0, r1: fn(*args, r0, r1), t, 8 * t * heads * rot)
    return True
