"""serve.zoo.decoders.layers.Linear's fused epilogues against numpy in float64: the activation (GPT-2's GELU) and
the residual add, through the native kernels (lanes writing their columns of one output) and the numpy fallback,
at a decode step's row counts; an activation with a residual is refused."""

from __future__ import annotations

import numpy as np
import pytest

from serve.backend import cpu_native
from serve.zoo.decoders import layers


def _gelu_tanh(v: np.ndarray) -> np.ndarray:
    return 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3)))


@pytest.fixture(params=["native", "numpy"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "native" and not cpu_native.available():
        pytest.skip("no native kernel build for this CPU")
    if request.param == "numpy":
        monkeypatch.setattr(cpu_native, "_lib", None)
    return str(request.param)


@pytest.mark.parametrize("rows", [1, 3, 16, 64])
def test_linear_epilogues_match_numpy(backend: str, rows: int) -> None:
    rng = np.random.default_rng(rows)
    w, b = rng.standard_normal((96, 200)).astype(np.float32), rng.standard_normal(200).astype(np.float32)
    x, res = rng.standard_normal((rows, 96)).astype(np.float32), rng.standard_normal((rows, 200)).astype(np.float32)
    linear = layers.Linear(w, b)
    assert (linear.weight is None) == (backend == "native")
    ref = x.astype(np.float64) @ w + b
    np.testing.assert_allclose(linear(x), ref, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(linear(x, act="gelu_tanh"), _gelu_tanh(ref), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(linear(x, residual=res), ref + res, rtol=1e-5, atol=1e-4)


def test_an_activation_with_a_residual_is_refused() -> None:
    linear = layers.Linear(np.ones((4, 8), np.float32))
    x = np.ones((2, 4), np.float32)
    with pytest.raises(ValueError, match="residual"):
        linear(x, act="gelu_tanh", residual=np.ones((2, 8), np.float32))
    with pytest.raises(ValueError, match="act"):
        linear(x, act="relu")


@pytest.mark.parametrize("rows", [1, 16])
def test_norms_and_swiglu_match_float64_native_and_numpy(backend: str, rows: int) -> None:
    """rms_norm, add_rms_norm (Gemma's x + post_norm(a) and the norm after it) and silu_and_mul, the native
    kernels (serve.backend.cpu_decode) and the numpy fallback alike."""
    rng = np.random.default_rng(rows)
    x, y, w = (rng.standard_normal(s).astype(np.float32) for s in ((rows, 96), (rows, 96), (96,)))

    def ref(s: np.ndarray) -> np.ndarray:
        s = s.astype(np.float64)
        return s / np.sqrt(np.mean(s * s, axis=-1, keepdims=True) + 1e-6) * w

    np.testing.assert_allclose(layers.rms_norm(x, w, 1e-6), ref(x), rtol=1e-5, atol=1e-5)
    s, h = layers.add_rms_norm(x, y, w, 1e-6)
    np.testing.assert_array_equal(s, x + y)
    np.testing.assert_allclose(h, ref(x + y), rtol=1e-5, atol=1e-5)
    gu = rng.standard_normal((rows, 2 * 40)).astype(np.float32) * 3
    g, u = gu[:, :40].astype(np.float64), gu[:, 40:].astype(np.float64)
    np.testing.assert_allclose(layers.silu_and_mul(gu), g / (1 + np.exp(-g)) * u, rtol=1e-5, atol=1e-5)
