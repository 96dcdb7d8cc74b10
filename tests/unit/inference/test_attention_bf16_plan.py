"""A bfloat16 plan's attention (serve.inference.attention_products): the two products of each planned
nn.MultiheadAttention on the bf16 fused kernel where chosen, describe() naming which ran and why, the plan within
1e-2 of eager float32 (unmasked, key padding, causal) and a classifier's clear top-1 kept; a float32 plan and eager
attention make no choice and stay float32."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from serve import nn
from serve.backend import cpu_native
from serve.inference import attention_products, optimize
from tests.unit.zoo.parity import assert_rel_close

pytestmark = pytest.mark.skipif(cpu_native.attention_bf16_kernel() is None, reason="no AVX512-BF16 kernel build")
RNG = np.random.default_rng(3)
BF16 = attention_products.BF16


def _x(*shape):
    return serve.from_numpy(RNG.standard_normal(shape).astype(np.float32))


def _encoder(d=128, heads=4, layers=2):
    layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, activation="gelu", batch_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()


def _attention_entries(opt):
    return opt.describe()["attention"]


def test_bert_like_encoder_runs_its_attention_in_bf16_within_1e2():
    model, x = _encoder(), _x(2, 24, 128)  # head dim 32
    with serve.no_grad():
        want = model(x)
        opt = optimize(model, (x,), dtype="bfloat16", tune=False)
        got = opt(x)
    assert opt.optimized, opt.reason
    entries = _attention_entries(opt)
    assert [e["layer"] for e in entries] == ["layers.0.self_attn.attention", "layers.1.self_attn.attention"]
    assert all(e["kernel"] == BF16 and e["dtype"] == "bfloat16" and e["engine"] for e in entries)
    assert entries[0]["input"] == [2, 4, 24, 32]  # (N, heads, L, hd)
    assert_rel_close(got, want, 1e-2)


def test_timed_choice_says_why_float32_when_it_loses():
    model, x = _encoder(d=64, heads=2, layers=1), _x(2, 16, 64)
    with serve.no_grad():
        opt = optimize(model, (x,), dtype="bfloat16")
        got, want = opt(x), model(x)
    assert opt.optimized, opt.reason
    (entry,) = _attention_entries(opt)
    products = opt.plan.layers[0].self_attn.products
    (times,) = products.timings.values()
    assert set(times) == {attention_products.FP32, BF16} and entry["kernel"] == min(times, key=times.__getitem__)
    if entry["dtype"] == "float32":
        assert entry["float32_because"].startswith("timed: float32 native_attention")
    assert_rel_close(got, want, 1e-2)


class _Attend(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn, self.norm = nn.MultiheadAttention(64, 2, batch_first=True), nn.LayerNorm(64)

    def forward(self, x, pad=None, mask=None, causal=False):
        out = self.attn(x, x, x, key_padding_mask=pad, attn_mask=mask, need_weights=False, is_causal=causal)[0]
        return self.norm(x + out)


@pytest.mark.parametrize("kind", ["padding", "float", "causal"])
def test_masked_attention_runs_bf16_within_1e2(kind):
    model, x = _Attend().eval(), _x(3, 20, 64)
    # a float key padding mask (-inf: padding; a bool one sends the call to PyTorch's fast path: the original)
    pad = serve.from_numpy(
        np.where(np.arange(20)[None, :] >= np.array([[20], [13], [7]]), -np.inf, 0.0).astype(np.float32)
    )
    kwargs = {"padding": {"pad": pad}, "float": {"mask": _x(20, 20)},
              "causal": {"mask": serve.from_numpy(np.triu(np.full((20, 20), -np.inf, np.float32), 1)),
                         "causal": True}}[kind]  # fmt: skip
    with serve.no_grad():
        want = model(x, **kwargs)
        opt = optimize(model, dtype="bfloat16", tune=False)
        got = opt(x, **kwargs)  # planned at this first call
    assert opt.optimized, opt.reason
    assert set(opt.plan.attn.products.choices.values()) == {BF16}
    assert_rel_close(got, want, 1e-2)


def test_float32_plan_and_eager_make_no_choice():
    model, x = _encoder(d=64, heads=2, layers=1), _x(2, 16, 64)
    with serve.no_grad():
        opt = optimize(model, (x,), tune=False)
        got, want = opt(x), model(x)
    assert opt.optimized and not _attention_entries(opt)
    assert not opt.plan.layers[0].self_attn.products.choices
    assert_rel_close(got, want, 1e-4)


def test_a_classifier_keeps_its_clear_top1():
    """A mean-pooled encoder with a linear head over 64 sequences, the plan's products and attention in bf16: every
    clear top-1 (top two apart by 5% of the logits' range) is kept, and >= 90% overall."""

    class Classifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder, self.head = _encoder(d=64, heads=2), nn.Linear(64, 10)

        def forward(self, x):
            return self.head(self.encoder(x).mean(1))  # (N, L, 64) -> (N, 64) -> (N, 10)

    model, x = Classifier().eval(), _x(64, 12, 64)
    with serve.no_grad():
        want = model(x).numpy()
        opt = optimize(model, (x,), dtype="bfloat16", tune=False)
        got = opt(x).numpy()
    assert opt.optimized, opt.reason
    assert {e["kernel"] for e in _attention_entries(opt)} == {BF16}
    assert np.abs(got - want).max() <= 1e-2 * np.abs(want).max()
    top2 = np.sort(want, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 5e-2 * np.ptp(want)
    agree = got.argmax(1) == want.argmax(1)
    assert clear.sum() >= 16 and agree[clear].all() and agree.mean() >= 0.9


def test_sdpa_attention_of_a_bert_is_routed_while_the_plan_runs():
    """serve.zoo's BERT computes attention through scaled_dot_product_attention: a bfloat16 plan's calls take the
    plan-wide choice (cpu_attention.ROUTE, set only during the plan's call), eager ones stay float32."""
    from serve.backend import cpu_attention
    from serve.zoo import BertConfig, BertModel

    config = BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=32, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)  # fmt: skip
    model = BertModel(config).eval()
    ids = serve.from_numpy(RNG.integers(0, 100, (2, 24)))
    with serve.no_grad():
        want = model(ids)
        opt = optimize(model, (ids,), dtype="bfloat16", tune=False)
        got = opt(ids)
        assert cpu_attention.ROUTE.get() is None  # only inside the plan's call
        again = model(ids)
    assert opt.optimized, opt.reason
    (entry,) = [e for e in opt.describe()["attention"] if e["layer"] == "scaled_dot_product_attention"]
    assert entry["kernel"] == BF16 and entry["input"] == [2, 2, 24, 32]
    outputs = [(g, w) for g, w in zip(got, want, strict=True)] if isinstance(got, tuple) else [(got, want)]
    for g, w in outputs:
        assert_rel_close(g, w, 1e-2)
    np.testing.assert_array_equal(np.asarray((again[0] if isinstance(again, tuple) else again)._data),
                                  np.asarray((want[0] if isinstance(want, tuple) else want)._data))  # fmt: skip

    fp32 = optimize(model, (ids,), tune=False)
    assert fp32.optimized and not fp32.describe()["attention"]


@pytest.mark.parametrize("allowed", [(BF16,), (attention_products.FP32,), ("blas",)])
def test_kernels_chooses_or_excludes_the_bf16_attention(allowed):
    """optimize(kernels=...) takes the attention's kernel names: naming native_attention_bf16 offers it (taken untimed
    at tune=False), leaving it out keeps the attention float32 and describe() says why."""
    model, x = _encoder(d=64, heads=2, layers=1), _x(2, 16, 64)
    with serve.no_grad():
        want = model(x)
        opt = optimize(model, (x,), dtype="bfloat16", tune=False, kernels=allowed)
        got = opt(x)
    assert opt.optimized, opt.reason
    (entry,) = _attention_entries(opt)
    if BF16 in allowed:
        assert entry["kernel"] == BF16 and entry["dtype"] == "bfloat16"
    else:
        assert entry["kernel"] == attention_products.FP32 and entry["dtype"] == "float32"
        assert "optimize(kernels=...)" in entry["float32_because"]
    assert_rel_close(got, want, 1e-2)


def test_kernels_names_the_attention_kernels_when_a_name_is_unknown():
    with pytest.raises(ValueError, match="native_attention_bf16"):
        optimize(_encoder(d=64, heads=2, layers=1), kernels=("native_attention_fp8",))
