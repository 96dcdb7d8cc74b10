"""What the CPU's convolution, pooling and resampling kernels (cpu_conv.py, cpu_pool.py, cpu_resample.py) share.

Planes are (N, C, H, W); the 1-d forms reach them with H = 1. `kernel`, `stride`, `dilation` and sizes are (h, w)
`Pair`s; a convolution's `padding` is (top, bottom, left, right) `Pads`, a pool's an (h, w) `Pair` (each side).
Half-precision inputs compute in float32, as PyTorch does on CPU (`upcast_half`), and the result goes back to the
input's dtype.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

Pair = tuple[int, int]
Pads = tuple[int, int, int, int]
HALF = frozenset((np.dtype(np.float16).num, np.dtype(ml_dtypes.bfloat16).num))


def upcast_half(a: np.ndarray) -> np.ndarray:
    """`a` in the dtype it is computed in: float16 and bfloat16 as float32, anything else as it is."""
    return a.astype(np.float32) if a.dtype.num in HALF else a


def pad_planes(x: np.ndarray, padding: Pads, value: Any = 0) -> np.ndarray:
    """x (N, C, H, W) padded with `value` by (top, bottom, left, right); x itself when there is no padding."""
    t, b, l, r = padding
    if not (t or b or l or r):
        return x
    n, c, h, w = x.shape
    out = np.full((n, c, h + t + b, w + l + r), value, x.dtype)
    out[:, :, t : t + h, l : l + w] = x
    return out
