"""Max pooling on channels-last activations, so a planned network does not leave that layout to pool.

The eager max pool works on (N, C, H, W) planes; given the NCHW view of a channels-last result (what the native
convolutions return) it walks memory across the grain. Here the pool runs on the (N, H, W, C) array itself:
serve's native kernel (vectorized over the contiguous channels, the lanes splitting the output pixels) or, without
it, a separable max (along W, then along H) in numpy, one vectorized maximum over rows of channels per tap.
Anything else (ceil_mode, indices, dilation, other layouts) runs the original module.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from serve.backend import cpu_threads
from serve.inference import arena, kernels
from serve.inference.epilogue import wrap
from serve.nn import MaxPool2d
from serve.nn.module import Module
from serve.tensor import dtypes
from serve.tensor.tensor import Tensor

__all__ = ["PlannedMaxPool2d"]


def _pair(v: Any) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _max_along(x: np.ndarray, axis: int, k: int, s: int, out_len: int) -> np.ndarray:
    """Sliding max of width k, stride s, along `axis` (1 or 2) of x."""

    def taps(j: int) -> np.ndarray:
        index = [slice(None)] * x.ndim
        index[axis] = slice(j, j + s * (out_len - 1) + 1, s)
        return x[tuple(index)]

    out = taps(0).copy()
    for j in range(1, k):
        np.maximum(out, taps(j), out=out)
    return out


class PlannedMaxPool2d(Module):
    def __init__(self, pool: MaxPool2d) -> None:
        super().__init__()
        self.original = pool
        self.kernel, self.stride = _pair(pool.kernel_size), _pair(pool.stride or pool.kernel_size)
        self.padding = _pair(pool.padding)
        self.simple = _pair(pool.dilation) == (1, 1) and not pool.ceil_mode and not pool.return_indices
        self.simple = self.simple and 2 * max(self.padding) <= min(self.kernel)  # PyTorch's own limit

    def forward(self, x: Any) -> Any:
        if not (self.simple and isinstance(x, Tensor) and x.ndim == 4 and x._dtype is dtypes.float32
                and x._device.type == "cpu"):  # fmt: skip
            return self.original(x)
        nhwc = x._data.transpose(0, 2, 3, 1)
        if not nhwc.flags.c_contiguous or x._requires_grad:
            return self.original(x)
        n, h, w, c = nhwc.shape
        (kh, kw), (sh, sw), (ph, pw) = self.kernel, self.stride, self.padding
        oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
        if oh <= 0 or ow <= 0:
            return self.original(x)
        out = arena.empty(self, (n, oh, ow, c))
        nat = kernels.native()
        if nat is not None:

            def pixels(p0: int, p1: int) -> None:
                nat.max_pool_nhwc(nhwc, self.kernel, self.stride, (ph, ph, pw, pw), out=out, pixels=(p0, p1))

            big = nhwc.nbytes >= cpu_threads.SPLIT_BYTES
            cpu_threads.parallel(pixels, cpu_threads.spans(n * oh * ow) if big else [(0, n * oh * ow)])
            return wrap(out.transpose(0, 3, 1, 2), x)

        def part(i0: int, i1: int) -> None:
            xp = nhwc[i0:i1]
            if ph or pw:
                xp = np.pad(xp, ((0, 0), (ph, ph), (pw, pw), (0, 0)), constant_values=-np.inf)
            out[i0:i1] = _max_along(_max_along(xp, 2, kw, sw, ow), 1, kh, sh, oh)

        parts = cpu_threads.spans(n) if nhwc.nbytes >= cpu_threads.SPLIT_BYTES else [(0, n)]
        cpu_threads.parallel(part, parts)
        return wrap(out.transpose(0, 3, 1, 2), x)
