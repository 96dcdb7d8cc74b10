"""The CPU primitive set: the pieces numpy lacks (erf, stable descending sort, softmax) against references."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from serve.backend import ops_cpu


def test_erf_matches_math_erf_to_double_precision():
    x = np.concatenate([np.linspace(-30, 30, 20001), [0.0, -0.0, 1.0, -1.0, 1e-300, 8.0, -8.0]])
    ref = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(ops_cpu.erf(x), ref, rtol=1e-15, atol=1e-16)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, ml_dtypes.bfloat16])
def test_erf_keeps_float_dtypes_and_nan(dtype):
    x = np.array([-2.0, 0.5, np.nan, np.inf, -np.inf], dtype=dtype)
    out = ops_cpu.erf(x)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_allclose(
        out[[0, 1, 3, 4]].astype(np.float64), [math.erf(-2.0), math.erf(0.5), 1.0, -1.0], rtol=1e-2
    )
    assert np.isnan(out[2].astype(np.float64))


def test_descending_sort_is_stable_and_puts_nan_first():
    a = np.array([1.0, 3.0, np.nan, 3.0, 2.0])
    values, idx = ops_cpu.sort(a, 0, descending=True)
    assert idx.tolist() == [2, 1, 3, 4, 0]
    assert np.isnan(values[0]) and values[1:].tolist() == [3.0, 3.0, 2.0, 1.0]


def test_topk_partition_path_matches_full_sort():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 400))
    values, idx = ops_cpu.topk(a, 5, 1, largest=True)
    np.testing.assert_array_equal(values, -np.sort(-a, axis=1)[:, :5])
    np.testing.assert_array_equal(np.take_along_axis(a, idx, 1), values)


def test_softmax_is_stable_for_large_inputs_and_sums_to_one():
    a = np.array([[1000.0, 0.0, -1000.0], [1.0, 2.0, 3.0]], dtype=np.float32)
    out = ops_cpu.softmax(a, 1)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.sum(1), 1.0, rtol=1e-6)
    log_out = ops_cpu.log_softmax(a, 1)
    np.testing.assert_allclose(log_out[0], [0.0, -1000.0, -2000.0], rtol=1e-6)
    np.testing.assert_allclose(log_out[1], np.log(out[1]), rtol=1e-5)


def test_half_precision_reductions_accumulate_in_float32():
    a = np.full(4096, 0.1, dtype=np.float16)
    total = ops_cpu.sum(a, None, False, np.dtype(np.float16))
    assert total.dtype == np.float16
    assert abs(float(total) - 409.6) < 0.5  # a float16 running sum would stall near 256


def test_view_refuses_incompatible_strides():
    a = np.arange(6).reshape(2, 3).T
    assert ops_cpu.view(a, (6,)) is None
    assert ops_cpu.view(np.arange(6), (2, 3)).shape == (2, 3)
    assert ops_cpu.strides(np.zeros((2, 3), np.float32)) == (3, 1)
