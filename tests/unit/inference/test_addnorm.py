"""The addnorm pass: a linear layer's residual add in its GEMM's epilogue, the LayerNorm after it in the same pass.
Plans of BERT, nn.TransformerEncoder (both norm orders, masks, batch 1 and 8) and the GPT decoder against eager
and, where torch is installed, its twin; models whose add or sum the capture cannot trust still answer as eager."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from serve import nn
from serve.inference import kernels, optimize
from serve.inference.addnorm import Pending, PlannedLayerNorm
from serve.zoo import BertConfig, BertModel
from serve.zoo.gpt import GPT, GPTConfig
from tests.unit.zoo.parity import assert_rel_close, copy_weights

pytestmark = pytest.mark.skipif(kernels.native() is None, reason="the fused add runs on the native GEMM")
RNG = np.random.default_rng(0)
CFG = BertConfig(vocab_size=100, hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
                 max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip


def _plan(model, *inputs):
    """A plan on the native kernels (tune=False takes them without timing), checked against eager here too."""
    with serve.no_grad():
        opt = optimize(model.eval(), inputs, tune=False)
        assert opt.optimized, opt.reason
        got, want = opt(*inputs), model(*inputs)
    return opt, got, want


def _x(*shape):
    return serve.from_numpy(RNG.standard_normal(shape).astype(np.float32))


@pytest.mark.parametrize("batch", [1, 8])
def test_bert_fuses_each_residual_add_and_layer_norm(batch):
    model = BertModel(CFG)
    ids = serve.from_numpy(RNG.integers(1, 100, (batch, 20)))
    mask = np.ones((batch, 20), np.int64)
    mask[0, 12:] = 0
    opt, got, want = _plan(model, ids, serve.from_numpy(mask))
    passes = opt.describe()["passes"]
    assert passes["residual_fused"] == 4 and passes["add_norm"] == 4 and passes["layer_norm"] == 5
    assert all(n.in_place for n in opt.plan.modules() if isinstance(n, PlannedLayerNorm) and n.n == 48
               and n is not opt.plan.embeddings.LayerNorm)  # fmt: skip
    assert_rel_close(got.last_hidden_state, want.last_hidden_state, 1e-4)
    assert_rel_close(got.pooler_output, want.pooler_output, 1e-4)


def _encoder(norm_first, torch=None):
    kw = {"dropout": 0.0, "batch_first": True, "norm_first": norm_first, "activation": "gelu"}
    model = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, **kw), 2, enable_nested_tensor=False)
    if torch is None:
        return model, None
    ref = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(32, 4, 64, **kw), 2, enable_nested_tensor=False)
    copy_weights(ref, model)
    return model, ref.eval()


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("batch", [1, 8])
def test_transformer_encoder_matches_eager_and_torch(norm_first, masked, batch):
    try:
        import torch
    except ImportError:
        torch = None
    model, ref = _encoder(norm_first, torch)
    x = RNG.standard_normal((batch, 9, 32)).astype(np.float32)
    pad = np.zeros((batch, 9), bool)
    pad[0, 6:] = True
    causal = np.triu(np.ones((9, 9), bool), 1)
    args = (serve.from_numpy(x),) + ((serve.from_numpy(causal), serve.from_numpy(pad)) if masked else ())
    opt, got, want = _plan(model, *args)
    passes = opt.describe()["passes"]
    assert passes["residual_fused"] == 4 and passes["attention"] == 2  # each layer's linear2 and out projection
    assert passes["add_norm"] == (3 if norm_first else 4)  # each norm that reads such a sum
    assert_rel_close(got, want, 1e-4)
    if ref is not None:
        with torch.no_grad():
            targs = [torch.from_numpy(a) for a in (x, causal, pad)][: len(args)]
            assert_rel_close(got, ref(*targs), 1e-4)


@pytest.mark.parametrize("batch", [1, 8])
def test_gpt_adds_each_residual_in_the_projection_and_keeps_the_sum(batch):
    model = GPT(GPTConfig(block_size=32, vocab_size=64, n_layer=2, n_head=4, n_embd=32))
    opt, got, want = _plan(model, serve.from_numpy(RNG.integers(0, 64, (batch, 12))))
    passes = opt.describe()["passes"]
    assert passes["residual_fused"] == 4 and passes["add_norm"] == 4  # ln_2 of each block, ln_1 of the 2nd, ln_f
    assert not opt.plan.transformer.h[1].ln_1.in_place  # that sum is also the next residual: kept
    assert opt.plan.transformer.ln_f.in_place
    assert_rel_close(got, want, 1e-4)


class _SumAlsoReturned(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.ln = nn.Linear(16, 16), nn.LayerNorm(16)

    def forward(self, x, r):
        h = self.fc(x)
        s = h + r
        return self.ln(s), s, h  # the capture sees only the norm read s, and nothing read h but the add


class _AddedToDifferentThings(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.ln = nn.Linear(16, 16), nn.LayerNorm(16)

    def forward(self, x, r):
        a = self.ln(self.fc(x) + r)
        b = self.fc(r) * 2.0  # the same layer's output, not added this time
        return a + b


class _InPlaceAddThenNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.ln = nn.Linear(16, 16), nn.LayerNorm(16, elementwise_affine=False)

    def forward(self, x, r):
        h = self.fc(x)
        h += r
        return self.ln(h)


class _ResidualWrittenBeforeTheNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.ln = nn.Linear(16, 16), nn.LayerNorm(16)

    def forward(self, x, r):
        s = self.fc(x) + r
        r.mul_(3.0)  # the deferred sum's operand changes before the sum is read
        return self.ln(s)


def test_a_sum_read_elsewhere_is_recomputed_not_normalized():
    model = _SumAlsoReturned()
    x, r = _x(4, 5, 16), _x(4, 5, 16)
    opt, got, want = _plan(model, x, r)
    assert opt.describe()["passes"]["add_norm"] == 1 and opt.plan.ln.in_place
    for g, w in zip(got, want):
        assert_rel_close(g, w, 1e-5)


def test_a_layer_not_always_added_is_not_deferred():
    model = _AddedToDifferentThings()
    opt, got, want = _plan(model, _x(6, 16), _x(6, 16))
    assert opt.describe()["passes"]["residual_fused"] == 0 and opt.describe()["passes"]["add_norm"] == 0
    assert_rel_close(got, want, 1e-5)


def test_in_place_add_runs_in_the_epilogue():
    model = _InPlaceAddThenNorm()
    x, r = _x(3, 7, 16), _x(3, 7, 16)
    opt, got, want = _plan(model, x, r)
    assert opt.describe()["passes"]["residual_fused"] == 1
    assert_rel_close(got, want, 1e-5)
    with serve.no_grad():
        y = opt.plan.fc(x)
        assert isinstance(y, Pending) and y.is_pending()
        y += r
        assert not y.is_pending()
        assert_rel_close(y, model.fc(x) + r, 1e-5)


def test_an_operand_written_before_the_sum_is_read_falls_back_to_eager():
    model = _ResidualWrittenBeforeTheNorm()
    x, r = _x(4, 16), _x(4, 16)
    want = model(x, serve.from_numpy(r.numpy().copy()))
    with serve.no_grad():
        opt = optimize(model.eval(), (x, serve.from_numpy(r.numpy().copy())), tune=False)
        got = opt(x, serve.from_numpy(r.numpy().copy()))
    assert not opt.optimized and "written in place" in opt.reason
    assert_rel_close(got, want, 1e-6)


def test_the_pass_switches_off():
    model = BertModel(CFG)
    ids = serve.from_numpy(RNG.integers(1, 100, (2, 10)))
    with serve.no_grad():
        opt = optimize(model.eval(), (ids,), passes=("fold", "fuse", "group", "pool"), tune=False)
    assert opt.describe()["passes"]["add_norm"] == 0 and opt.describe()["passes"]["layer_norm"] == 0
    assert not any(isinstance(m, PlannedLayerNorm) for m in opt.plan.modules())
