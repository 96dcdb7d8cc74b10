"""Weight-only int8 decoders (`load_pretrained(..., quantization="int8")`, the model-config's handler.quantization)
against the same decoder in float32, which test_families holds to transformers + torch. On tinychat's trained
weights (examples/tinychat), where logits carry meaning: int8 moves them by about 1% of their range and keeps the
argmax of every row of a 38-token prefill."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from serve.backend import cpu_int8, cpu_native
from serve.zoo.decoders import load_pretrained
from tests.unit.zoo.decoders.reference import PagedRunner

TINYCHAT = Path(__file__).resolve().parents[4] / "examples" / "tinychat" / "model"


def prefill_logits(quantization: str | None) -> np.ndarray:
    runner = PagedRunner(load_pretrained(TINYCHAT, quantization=quantization))
    seq = runner.add(list(range(2, 40)))
    return runner.step([(seq, len(seq.tokens))], all_logits=True)


def test_int8_products_stay_near_float32_on_trained_weights() -> None:
    decoder = load_pretrained(TINYCHAT, quantization="int8")
    parts = decoder.blocks[0].qkv._parts  # type: ignore[attr-defined]
    assert parts and all(isinstance(p[2], cpu_int8.QuantizedWeight) for p in parts)
    fp32, int8 = prefill_logits(None), prefill_logits("int8")
    scale = float(np.abs(fp32).max())
    assert np.abs(int8 - fp32).max() > 1e-4 * scale  # the products really ran on int8 weights
    np.testing.assert_allclose(int8, fp32, rtol=0, atol=3e-2 * scale)
    assert (int8.argmax(-1) == fp32.argmax(-1)).mean() >= 0.9


def test_the_numpy_fallback_gives_the_kernels_logits(monkeypatch: pytest.MonkeyPatch) -> None:
    routed = prefill_logits("int8")  # from cpu_int8.BF16_ROWS rows, the bf16 route where it is loaded
    monkeypatch.setattr(cpu_int8, "BF16_ROWS", 1 << 30)  # the fp32-activation route: the fallback's arithmetic
    native = prefill_logits("int8")
    monkeypatch.setattr(cpu_native, "library", lambda: None)
    monkeypatch.setattr(cpu_native, "available", lambda: False)
    fallback = prefill_logits("int8")
    scale = float(np.abs(native).max())
    np.testing.assert_allclose(fallback, native, rtol=0, atol=1e-4 * scale)
    np.testing.assert_allclose(routed, native, rtol=0, atol=1e-2 * scale)  # activations rounded to bf16
    assert (routed.argmax(-1) == native.argmax(-1)).mean() >= 0.9


def test_an_unknown_quantization_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="quantization 'int4' is not supported; use int8"):
        load_pretrained(TINYCHAT, quantization="int4")
