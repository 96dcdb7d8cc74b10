"""serve.backend.cpu_native's GEMM at every row count a decode step makes (the microkernel specialised for 1..MR
rows, row blocks balanced across a super block) and with a strided output and residual (lanes that split N write
their columns of one array), fp32 on each build and bf16 where the CPU has it, against float64 references."""

import numpy as np
import pytest

from serve.backend import cpu_native as cn
from serve.backend import cpu_threads

from .conftest import BUILDS

needs_native = pytest.mark.skipif(not BUILDS, reason="no native kernel build for this CPU")
ROWS = [*range(1, 26), 31, 64, 95, 96, 97, 200]  # every kernel of either build, both sides of a super block (96)


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _err(out, ref):
    return float(np.abs(out.astype(np.float64) - ref).max()) / max(1.0, float(np.abs(ref).max()))


@needs_native
@pytest.mark.parametrize("m", ROWS)
def test_gemm_every_row_count(build, m):
    rng = np.random.default_rng(m)
    k, n = 67, 3 * cn._need().nr + 5  # whole panels and an edge panel
    a, w, bias, res = _rand(rng, m, k), _rand(rng, k, n), _rand(rng, n), _rand(rng, m, n)
    packed = cn.pack_weight(w)
    ref = a.astype(np.float64) @ w + bias + res
    assert _err(cn.gemm(a, packed, bias=bias, residual=res), ref) <= 1e-5
    gelu = cn.gemm(a, packed, bias=bias, act="gelu_tanh")
    v = a.astype(np.float64) @ w + bias
    assert _err(gelu, 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3)))) <= 1e-5


@needs_native
@pytest.mark.parametrize("m", [1, 5, 16, 64])
def test_gemm_column_slices_of_one_output(build, m):
    """Two lanes each multiply by their packed column slice and write that slice of one (M, N) output, reading
    that slice of one residual: the whole product, nothing outside its columns touched."""
    rng = np.random.default_rng(7)
    k, n = 96, 200
    a, w, res = _rand(rng, m, k), _rand(rng, k, n), _rand(rng, m, n)
    spans = cpu_threads.spans(n, 2)
    parts = [(c0, c1, cn.pack_weight(w[:, c0:c1])) for c0, c1 in spans]
    out = np.full((m, n + 3), np.nan, np.float32)  # a row stride wider than the product

    def lane(i, _):
        c0, c1, packed = parts[i]
        cn.gemm(a, packed, residual=res[:, c0:c1], out=out[:, c0:c1])

    cpu_threads.parallel(lane, [(i, i + 1) for i in range(len(parts))])
    assert _err(out[:, :n], a.astype(np.float64) @ w + res) <= 1e-5
    assert np.isnan(out[:, n:]).all()


@needs_native
def test_gemm_rejects_scattered_rows(build):
    packed = cn.pack_weight(np.ones((4, 8), np.float32))
    a = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="contiguous rows"):
        cn.gemm(a, packed, out=np.empty((8, 3), np.float32).T)
    with pytest.raises(ValueError, match="shape"):
        cn.gemm(a, packed, residual=np.empty((3, 7), np.float32))


@pytest.mark.skipif(not cn.bf16_available(), reason="no AVX512-BF16 kernel build for this CPU")
@pytest.mark.parametrize("m", [1, 2, 7, 12, 13, 16, 64, 97])
def test_gemm_bf16_row_counts_and_slices(m):
    rng = np.random.default_rng(m)
    k, n = 65, 70
    a, w, res = _rand(rng, m, k), _rand(rng, k, n), _rand(rng, m, n)
    ref = cn.round_bf16(a).astype(np.float64) @ cn.round_bf16(w).astype(np.float64) + res
    out = np.full((m, n + 2), np.nan, np.float32)
    cn.gemm(a, cn.pack_weight(w[:, :30], "bfloat16"), residual=res[:, :30], out=out[:, :30])
    cn.gemm(a, cn.pack_weight(w[:, 30:], "bfloat16"), residual=res[:, 30:], out=out[:, 30:n])
    assert _err(out[:, :n], ref) <= 1e-5
