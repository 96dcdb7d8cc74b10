"""The CPU backend's fast paths against its plain ones: the separable max pool against the tap-by-tap pool that
also finds indices."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from serve.backend import cpu_memory, cpu_pool

CONFIGS = [  # (H, W), kernel, stride, padding, dilation
    ((112, 112), (3, 3), (2, 2), (1, 1), (1, 1)),
    ((9, 7), (3, 2), (2, 1), (1, 1), (2, 1)),
    ((10, 10), (3, 3), (3, 3), (1, 1), (2, 2)),
    ((5, 6), (1, 4), (1, 2), (0, 2), (1, 1)),
    ((8, 8), (2, 2), (2, 2), (0, 0), (1, 1)),
]


def _out(size, kernel, stride, padding, dilation, ceil):
    outs = []
    for n, k, s, p, d in zip(size, kernel, stride, padding, dilation):
        span = n + 2 * p - d * (k - 1) - 1
        o = (-(-span // s) if ceil else span // s) + 1
        if ceil and (o - 1) * s >= n + p:  # PyTorch: the last window must start inside the input or left padding
            o -= 1
        outs.append(o)
    return tuple(outs)


@pytest.mark.parametrize("ceil", [False, True])
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_separable_max_pool_matches_tap_by_tap(config, ceil, dtype) -> None:
    size, kernel, stride, padding, dilation = config
    rng = np.random.default_rng(0)
    x = rng.integers(-100, 100, (2, 3, *size)).astype(dtype)
    if dtype == np.float32:
        x[0, 1, 2, 3] = np.nan
        x[1, 2, 0, :] = -np.inf
    out = _out(size, kernel, stride, padding, dilation, ceil)
    fast, _ = cpu_pool.max_pool2d(x, kernel, stride, padding, dilation, out, False)
    plain, _ = cpu_pool.max_pool2d(x, kernel, stride, padding, dilation, out, True)
    assert fast.shape == (2, 3, *out) and fast.dtype == x.dtype
    np.testing.assert_array_equal(fast, plain)


def test_freed_buffers_are_kept_on_glibc() -> None:
    assert cpu_memory.keep_freed_buffers() is (platform.libc_ver()[0] == "glibc" and platform.system() == "Linux")
