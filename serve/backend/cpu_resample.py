"""CPU backend: resampling along trailing axes on numpy: non-constant padding and interpolation.

A plan holds one step per trailing axis: (idx,) reads x[idx] along it; (i0, i1, l0, l1) reads
x[i0] * l0 + x[i1] * l1. Both are linear, so `resample_adjoint` (each step scattered back, repeats accumulating)
is their gradient. The plans compute source positions as PyTorch does (reflect / replicate / circular padding,
negative pads cropping; nearest and nearest-exact in float32; linear with or without align_corners), so the
positions, and the results, match it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from serve.backend.cpu_planes import upcast_half

__all__ = ["linear_plan", "nearest_plan", "pad_plan", "resample", "resample_adjoint"]


def pad_plan(mode: str, size: int, before: int, after: int) -> tuple[np.ndarray]:
    """Source positions of reflect / replicate / circular padding (negative pads crop)."""
    i = np.arange(-before, size + after)
    if mode == "reflect":
        i = np.abs(i)
        i = np.where(i >= size, 2 * (size - 1) - i, i)
    elif mode == "replicate":
        i = np.clip(i, 0, size - 1)
    else:  # circular wraps within what is left after cropping, as PyTorch does
        lo, hi = max(-before, 0), size - max(-after, 0)
        i = lo + (np.arange(-max(before, 0), hi - lo + max(after, 0)) % (hi - lo))
    return (i,)


def nearest_plan(size: int, out: int, scale: float | None, exact: bool) -> tuple[np.ndarray]:
    """Source positions of nearest / nearest-exact, in PyTorch's float32 arithmetic."""
    if not exact and out == size:
        return (np.arange(out),)
    if not exact and out == 2 * size:
        return (np.arange(out) // 2,)
    step = np.float32(1.0 / scale if scale else size / out)
    pos = np.arange(out, dtype=np.float32) + (np.float32(0.5) if exact else np.float32(0))
    return (np.minimum(np.floor(pos * step).astype(np.int64), size - 1),)


def linear_plan(size: int, out: int, align_corners: bool, scale: float | None, dt: np.dtype) -> tuple:
    """Two source positions and weights per output, as PyTorch's linear interpolation computes them."""
    ct: Any = np.float64 if dt == np.float64 else np.float32
    if align_corners:
        step = ct((size - 1) / (out - 1)) if out > 1 else ct(0)
        src = step * np.arange(out, dtype=ct)
    else:
        step = ct(1.0 / scale if scale else size / out)
        src = np.maximum(step * (np.arange(out, dtype=ct) + ct(0.5)) - ct(0.5), ct(0))
    i0 = np.minimum(src.astype(np.int64), size - 1)
    l1 = np.clip(src - i0, 0, 1).astype(ct)
    return i0, np.minimum(i0 + 1, size - 1), (1 - l1).astype(ct), l1


def _along(v: np.ndarray, axis: int) -> np.ndarray:
    """Per-position weights shaped to broadcast along the (negative) `axis`."""
    return v.reshape((-1,) + (1,) * (-axis - 1))


def resample(a: np.ndarray, plan: tuple) -> np.ndarray:
    """Apply `plan` (one step per trailing axis, see the module docstring) to a."""
    dt = a.dtype
    out = a if all(len(p) == 1 for p in plan) else upcast_half(a)
    for axis, step in zip(range(-len(plan), 0), plan):
        if len(step) == 1:
            out = np.take(out, step[0], axis)
        else:
            i0, i1, l0, l1 = step
            out = np.take(out, i0, axis) * _along(l0, axis) + np.take(out, i1, axis) * _along(l1, axis)
    return out.astype(dt, copy=False)


def _scatter_axis(g: np.ndarray, idx: np.ndarray, size: int, axis: int) -> np.ndarray:
    """Zeros with `size` along `axis`, plus g[..., j, ...] added at idx[j] (sorted, then one reduceat)."""
    shape = list(g.shape)
    shape[axis] = size
    out = np.zeros(shape, g.dtype)
    if not idx.size:
        return out
    order = np.argsort(idx, kind="stable")
    sorted_idx = idx[order]
    starts = np.flatnonzero(np.r_[True, sorted_idx[1:] != sorted_idx[:-1]])
    sums = np.add.reduceat(np.take(g, order, axis), starts, axis)
    np.moveaxis(out, axis, 0)[sorted_idx[starts]] = np.moveaxis(sums, axis, 0)
    return out


def resample_adjoint(g: np.ndarray, sizes: tuple[int, ...], plan: tuple) -> np.ndarray:
    """The gradient of resample: the trailing axes go back to `sizes`, repeats accumulating."""
    dt = g.dtype
    out = upcast_half(g)
    for axis, step, size in reversed(list(zip(range(-len(plan), 0), plan, sizes))):
        if len(step) == 1:
            out = _scatter_axis(out, step[0], size, axis)
        else:
            i0, i1, l0, l1 = step
            both = np.concatenate([out * _along(l0, axis), out * _along(l1, axis)], axis)
            out = _scatter_axis(both, np.concatenate([i0, i1]), size, axis)
    return out.astype(dt, copy=False)
