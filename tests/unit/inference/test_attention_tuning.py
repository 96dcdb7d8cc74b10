"""A bfloat16 plan's attention choice (serve.inference.attention_products) in the kernel-choice cache
(serve.inference.tuning): timed once, then taken by the next process without timing. Timing is counted, never
measured."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import serve
from serve import nn
from serve.backend import cpu_native
from serve.inference import attention_products, optimize, tuning
from serve.inference.attention_products import AttentionProducts

pytestmark = pytest.mark.skipif(cpu_native.attention_bf16_kernel() is None, reason="no AVX512-BF16 kernel build")


def _encoder() -> nn.Module:
    serve.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 2, 128, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()


def _x() -> serve.Tensor:
    return serve.from_numpy(np.random.default_rng(0).standard_normal((2, 16, 64)).astype(np.float32))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(tuning.ENV, str(tmp_path))
    tuning.forget()
    yield tmp_path
    tuning.forget()


@pytest.fixture
def timed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times an attention's kernels were timed (one entry per AttentionProducts._time call)."""
    calls: list[int] = []
    original = AttentionProducts._time

    def counting(self: AttentionProducts, *args: object) -> dict[str, float]:
        calls.append(1)
        return original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(AttentionProducts, "_time", counting)
    return calls


def _products(opt: object) -> AttentionProducts:
    return opt.plan.layers[0].self_attn.products  # type: ignore[attr-defined]


def test_a_second_plan_takes_the_kept_attention_choice_without_timing(cache: Path, timed: list[int]) -> None:
    with serve.no_grad():
        first = optimize(_encoder(), (_x(),), dtype="bfloat16")
    assert first.optimized, first.reason
    assert len(timed) == 1, "the first plan times its one attention shape"
    chosen = dict(_products(first).choices)
    [file] = cache.glob("kernels-*.json")
    kept = {k: v for k, v in json.loads(file.read_text())["choices"].items() if k.startswith("('AttentionProducts'")}
    assert list(kept.values()) == list(chosen.values())

    tuning.forget()  # as a new process would: read the file again
    with serve.no_grad():
        second = optimize(_encoder(), (_x(),), dtype="bfloat16")
    assert second.optimized, second.reason
    assert len(timed) == 1, "the second plan timed the attention again"
    assert _products(second).choices == chosen and _products(second).timings == {}


def test_without_the_cache_each_plan_times_the_attention(timed: list[int]) -> None:
    assert tuning.cache_dir() is None  # tests/conftest.py turns it off
    with serve.no_grad():
        optimize(_encoder(), (_x(),), dtype="bfloat16")
        optimize(_encoder(), (_x(),), dtype="bfloat16")
    assert len(timed) == 2


def test_a_kept_choice_the_attention_does_not_offer_is_timed_again(cache: Path, timed: list[int]) -> None:
    with serve.no_grad():
        optimize(_encoder(), (_x(),), dtype="bfloat16")
    [file] = cache.glob("kernels-*.json")
    data = json.loads(file.read_text())
    data["choices"] = {key: "no_such_kernel" for key in data["choices"]}
    file.write_text(json.dumps(data))
    tuning.forget()
    with serve.no_grad():
        again = optimize(_encoder(), (_x(),), dtype="bfloat16")
    assert len(timed) == 2 and set(_products(again).choices.values()) <= set(AttentionProducts.KERNELS)
    assert attention_products.FP32 in AttentionProducts.KERNELS
