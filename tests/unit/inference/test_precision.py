"""describe()'s per-layer precision: which dtype each planned product runs in, and why float32 under a bfloat16 plan
(serve.inference.precision), against the kernels the layers really chose."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from serve import nn
from serve.backend import cpu_native
from serve.inference import kernels, optimize

RNG = np.random.default_rng(0)


def _model() -> nn.Module:
    # stem (3 input channels: no bf16 kernel), two middle convolutions, a middle and a last linear layer
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        nn.Conv2d(64, 32, 3, stride=2), nn.ReLU(),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, 10)).eval()  # fmt: skip


def _x() -> serve.Tensor:
    return serve.from_numpy(RNG.standard_normal((2, 3, 16, 16)).astype(np.float32))


def _by_layer(opt) -> dict[str, dict]:
    entries = opt.describe()["precision"]
    assert len({e["layer"] for e in entries}) == len(entries)  # one input shape each here
    return {e["layer"]: e for e in entries}


def test_float32_plan_lists_every_layer_in_float32_without_reasons():
    model, x = _model(), _x()
    with serve.no_grad():
        opt = optimize(model, (x,))
    info = opt.describe()
    layers = _by_layer(opt)
    assert set(layers) == {"0", "2", "4", "7", "9"}
    for name, entry in layers.items():
        assert entry["dtype"] == "float32" and "float32_because" not in entry
        assert entry["kernel"] == opt.plan[int(name)].choices[next(iter(opt.plan[int(name)].choices))]
        assert entry["input"][0] == 2 and "ms" not in entry  # times only where they explain a bf16 plan's float32
    assert info["product_dtypes"] == {"float32": 5}
    assert sum(info["kernels"].values()) == 5


@pytest.mark.skipif(not kernels.bf16_products(), reason="needs AVX512-BF16 and serve's native kernels")
def test_bfloat16_plan_says_which_layers_run_bf16_and_why_the_others_do_not():
    model, x = _model(), _x()
    bf16 = ("native_nhwc_bf16", "native_bf16")
    with serve.no_grad():
        want = model(x)
        forced = optimize(model, (x,), dtype="bfloat16", tune=False, kernels=bf16)  # untimed: bf16 where offered
        without = optimize(model, (x,), dtype="bfloat16", kernels=("native_nhwc", "native"))
        timed = optimize(model, (x,), dtype="bfloat16")
        for opt in (forced, without, timed):
            assert opt.optimized, opt.reason
            got = opt(x).numpy()
            assert np.abs(got - want.numpy()).max() <= 1e-2 * np.abs(want.numpy()).max()

    layers = _by_layer(forced)
    assert [layers[n]["dtype"] for n in ("0", "2", "4", "7", "9")] == ["float32", *["bfloat16"] * 3, "float32"]
    assert "first and last" in layers["0"]["float32_because"] and "first and last" in layers["9"]["float32_because"]
    assert "ms" not in layers["2"]  # tune=False times nothing
    assert forced.describe()["product_dtypes"] == {"float32": 2, "bfloat16": 3}
    assert layers["2"]["engine"] == cpu_native.bf16_engine() in ("amx", "avx512_bf16") and "engine" not in layers["0"]

    for name in ("2", "4", "7"):
        assert _by_layer(without)[name]["dtype"] == "float32"
        assert "optimize(kernels=...)" in _by_layer(without)[name]["float32_because"]

    for name in ("2", "4", "7"):  # the timing decides; describe says which, and for float32 the two times
        entry, layer = _by_layer(timed)[name], timed.plan[int(name)]
        times = next(iter(layer.timings.values()))
        assert entry["kernel"] == next(iter(layer.choices.values())) == min(times, key=times.__getitem__)
        assert entry["dtype"] == ("bfloat16" if entry["kernel"].endswith("_bf16") else "float32")
        if entry["dtype"] == "float32":
            bf16_name = next(k for k in entry["ms"] if k.endswith("_bf16"))
            assert set(entry["ms"]) == {entry["kernel"], bf16_name}
            assert entry["float32_because"].startswith(f"timed: float32 {entry['kernel']} ")
            assert f"beat bfloat16 {bf16_name}" in entry["float32_because"]
            assert entry["ms"][entry["kernel"]] <= entry["ms"][bf16_name]
        else:
            assert "ms" not in entry and "float32_because" not in entry


def test_depthwise_layer_says_it_has_no_bfloat16_kernel():
    if not kernels.bf16_products():
        pytest.skip("needs AVX512-BF16 and serve's native kernels")
    model = nn.Sequential(nn.Conv2d(3, 32, 3), nn.Conv2d(32, 32, 3, groups=32), nn.Conv2d(32, 8, 1)).eval()
    with serve.no_grad():
        opt = optimize(model, (_x(),), dtype="bfloat16")
    entry = _by_layer(opt)["1"]
    assert entry["dtype"] == "float32" and "no bfloat16 kernel" in entry["float32_because"]


def test_the_workers_report_drops_the_per_layer_list_first_when_too_big():
    """The worker's handshake carries describe(): a list too big for it goes, its counts and the rest stay."""
    from serve.worker import optimizing

    class _Opt:
        optimized, reason = True, None

        def __init__(self, entries: int) -> None:
            self.entries = entries

        def describe(self) -> dict:
            precision = [{"layer": f"layer{i}", "input": [8, 3, 224, 224], "kernel": "native_nhwc_bf16",
                          "dtype": "bfloat16"} for i in range(self.entries)]  # fmt: skip
            return {"kernels": {"native_nhwc_bf16": self.entries}, "product_dtypes": {"bfloat16": self.entries},
                    "precision": precision}  # fmt: skip

    small, big = optimizing._report(_Opt(3), [1]), optimizing._report(_Opt(2000), [1, 8])
    assert len(small["precision"]) == 3 and small["warmed"] == [1]
    assert "precision" not in big and big["product_dtypes"] == {"bfloat16": 2000} and big["warmed"] == [1, 8]
    assert big["kernels"] == {"native_nhwc_bf16": 2000}


@pytest.mark.skipif(not kernels.bf16_products(), reason="needs AVX512-BF16 and serve's native kernels")
def test_bfloat16_plans_of_zoo_models_agree_with_pytorch_fp32():
    """bf16 products forced on every layer that has them (the timing might keep float32): ResNet-18's logits within
    1e-2 of PyTorch fp32 with the same top-1 wherever PyTorch's top two are apart by more than that, and the
    BERT-base-shaped (scaled down) encoder's output within 1e-2."""
    torch = pytest.importorskip("torch")
    from serve.zoo import resnet18
    from tests.unit.zoo import twins_vision as tv
    from tests.unit.zoo.parity import assert_rel_close, copy_weights, randomize_norms

    bf16 = ("native_nhwc_bf16", "native_bf16")
    torch.manual_seed(0)
    ref = tv.resnet18(num_classes=10)
    randomize_norms(ref)
    model = resnet18(num_classes=10)
    copy_weights(ref, model)
    model.eval(), ref.eval()
    x = np.random.default_rng(3).standard_normal((4, 3, 64, 64)).astype(np.float32)
    with serve.no_grad(), torch.no_grad():
        opt = optimize(model, (serve.from_numpy(x),), dtype="bfloat16", tune=False, kernels=bf16)
        got, want = opt(serve.from_numpy(x)).numpy(), ref(torch.from_numpy(x)).numpy()
    assert opt.optimized, opt.reason
    assert opt.describe()["product_dtypes"]["bfloat16"] >= 15  # of 21: stem, fc and the 1x1 downsamples' few
    assert_rel_close(got, want, 1e-2)
    top2 = np.sort(want, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 2e-2 * np.abs(want).max()
    assert clear.any() and (got.argmax(1)[clear] == want.argmax(1)[clear]).all()

    layer = torch.nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, activation="gelu", batch_first=True)
    ref_enc = torch.nn.TransformerEncoder(layer, 2).eval()
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, activation="gelu",
                                                           batch_first=True), 2)  # fmt: skip
    copy_weights(ref_enc, enc)
    src = np.random.default_rng(4).standard_normal((2, 16, 64)).astype(np.float32)
    with serve.no_grad(), torch.no_grad():
        opt_enc = optimize(enc.eval(), (serve.from_numpy(src),), dtype="bfloat16", tune=False, kernels=bf16)
        got_enc, want_enc = opt_enc(serve.from_numpy(src)), ref_enc(torch.from_numpy(src))
    assert opt_enc.optimized, opt_enc.reason
    assert opt_enc.describe()["product_dtypes"]["bfloat16"] >= 6  # of 8: the first and last stay float32
    assert_rel_close(got_enc, want_enc, 1e-2)


@pytest.mark.skipif(not kernels.bf16_products(), reason="needs AVX512-BF16 and serve's native kernels")
def test_an_encoders_first_product_is_its_attentions_input_projection():
    """The capture sees nn.MultiheadAttention as one call: its input projection, the model's first product, is the
    layer mixed precision keeps float32 (not the feed-forward product after it); the last stays the last."""
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation="gelu", batch_first=True)
    model = nn.TransformerEncoder(layer, 2).eval()
    x = serve.from_numpy(RNG.standard_normal((2, 8, 32)).astype(np.float32))
    with serve.no_grad():
        opt = optimize(model, (x,), dtype="bfloat16", tune=False, kernels=("native_bf16",))
    assert opt.optimized, opt.reason
    layers = _by_layer(opt)
    assert layers["layers.0.self_attn.in_proj"]["dtype"] == "float32"
    assert "first and last" in layers["layers.0.self_attn.in_proj"]["float32_because"]
    assert layers["layers.1.linear2"]["dtype"] == "float32"
    others = [name for name in layers if name not in ("layers.0.self_attn.in_proj", "layers.1.linear2")]
    assert len(others) == 6 and all(layers[name]["dtype"] == "bfloat16" for name in others)
