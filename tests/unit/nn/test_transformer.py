"""Transformer encoder/decoder layers, their stacks and nn.Transformer against PyTorch with the same weights."""

from __future__ import annotations

import numpy as np
import pytest

import serve
import serve.nn.functional as F
from serve import nn
from tests.helpers import assert_close, needs_torch, torch

pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning")

RTOL, ATOL = 1e-5, 1e-5
GRAD_TOL = 1e-4
D, HEADS, FF = 8, 2, 16


def _load(ref, ours):
    ours.load_state_dict({k: serve.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    return ref, ours


def _pair(make, seed=0):
    """make(lib) builds the module from lib.nn; both get PyTorch's weights, with non-trivial norms and biases."""
    torch.manual_seed(seed)
    ref = make(torch)
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if p.ndim == 1:
                p.uniform_(0.5, 1.5) if "norm" in name and "weight" in name else p.uniform_(-0.5, 0.5)
    return _load(ref, make(serve))


def _arrays(*shapes, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _compare(ref, ours, inputs, masks=None, grad=True, **kw):
    """Call both with the same inputs (numpy) and masks (numpy, by keyword); compare outputs and input grads."""
    t_in = [torch.tensor(a, requires_grad=grad) for a in inputs]
    s_in = [serve.tensor(a, requires_grad=grad) for a in inputs]
    t_masks = {k: torch.tensor(v) for k, v in (masks or {}).items()}
    s_masks = {k: serve.tensor(v) for k, v in (masks or {}).items()}
    t_out = ref(*t_in, **t_masks, **kw)
    s_out = ours(*s_in, **s_masks, **kw)
    assert_close(s_out, t_out, atol=ATOL, rtol=RTOL)
    if not grad:
        return
    (cot,) = _arrays(tuple(t_out.shape), seed=9)
    (t_out * torch.tensor(cot)).sum().backward()
    (s_out * serve.tensor(cot)).sum().backward()
    for s, t in zip(s_in, t_in):
        assert_close(s.grad, t.grad, atol=GRAD_TOL, rtol=GRAD_TOL)


def _kpm(batch, seq, pads):
    """Key padding mask (True = padding) with the last pads[i] positions of sequence i padded."""
    m = np.zeros((batch, seq), dtype=bool)
    for i, n in enumerate(pads):
        if n:
            m[i, seq - n :] = True
    return m


def _causal(n):
    return np.triu(np.full((n, n), -np.inf, dtype=np.float32), 1)


def _encoder_layer(**kw):
    def make(lib):
        act = kw.get("activation", "relu")
        if act == "gelu_fn":
            act = lib.nn.functional.gelu
        elif act == "tanh_fn":
            act = lib.tanh
        return lib.nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0, **{**kw, "activation": act})

    return make


# ---- TransformerEncoderLayer ----------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"batch_first": True},
        {"norm_first": True},
        {"activation": "gelu"},
        {"activation": "gelu_fn"},
        {"activation": "tanh_fn", "batch_first": True},
        {"bias": False, "norm_first": True},
    ],
    ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "default",
)
def test_encoder_layer(kw):
    ref, ours = _pair(_encoder_layer(**kw))
    (x,) = _arrays((2, 5, D) if kw.get("batch_first") else (5, 2, D))
    _compare(ref, ours, [x])


@needs_torch
@pytest.mark.parametrize("masks", ["src_mask_float", "src_mask_inf", "src_mask_bool", "kpm", "both", "causal"])
@pytest.mark.parametrize("training", [True, False])
def test_encoder_layer_masks(masks, training):
    ref, ours = _pair(_encoder_layer(batch_first=True))
    ref.train(training), ours.train(training)
    (x,) = _arrays((3, 5, D))
    attn = np.random.default_rng(4).random((5, 5)) < 0.3
    np.fill_diagonal(attn, False)
    kw = {
        "src_mask_float": {"src_mask": np.random.default_rng(2).uniform(-2, 2, (5, 5)).astype(np.float32)},
        "src_mask_inf": {"src_mask": np.where(attn, -np.inf, 0.0).astype(np.float32)},
        "src_mask_bool": {"src_mask": attn},
        "kpm": {"src_key_padding_mask": _kpm(3, 5, [0, 2, 5])},
        "both": {"src_mask": attn, "src_key_padding_mask": _kpm(3, 5, [0, 2, 1])},
        "causal": {"src_mask": _causal(5)},
    }[masks]
    extra = {"is_causal": True} if masks == "causal" else {}
    _compare(ref, ours, [x], kw, grad=training, **extra)
    # serving: PyTorch's fused inference path, which reads a float mask as bool (non-zero = masked), a bug
    # serve does not copy; the two agree on 0/-inf float masks
    if not training and masks != "src_mask_float":
        with torch.no_grad(), serve.no_grad():
            _compare(ref, ours, [x], kw, grad=False, **extra)


@needs_torch
def test_encoder_layer_unbatched():
    ref, ours = _pair(_encoder_layer())
    (x,) = _arrays((5, D))
    _compare(ref, ours, [x], {"src_key_padding_mask": np.array([False, False, False, True, True])})


@needs_torch
def test_encoder_layer_dropout_is_identity_in_eval():
    torch.manual_seed(0)
    ref, ours = _load(*(lib.nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.3) for lib in (torch, serve)))
    ref.eval(), ours.eval()
    (x,) = _arrays((5, 2, D))
    _compare(ref, ours, [x])
    ours.train()
    sx = serve.tensor(x)
    assert not np.allclose(ours(sx).detach().numpy(), ours(sx).detach().numpy())


# ---- TransformerEncoder ---------------------------------------------------------------------------------
def _encoder(norm=True, **kw):
    def make(lib):
        layer = lib.nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0, **kw)
        return lib.nn.TransformerEncoder(layer, 2, norm=lib.nn.LayerNorm(D) if norm else None)

    return make


@needs_torch
@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("pads", [[0, 2, 5], [1, 0, 0]])
@pytest.mark.parametrize("no_grad", [True, False])
def test_encoder_eval_with_padding(norm, pads, no_grad):
    # eval + no grad + right padding: PyTorch runs nested tensors and returns zeros at the padded positions
    ref, ours = _pair(_encoder(norm=norm, batch_first=True))
    ref.eval(), ours.eval()
    (x,) = _arrays((3, 5, D))
    masks = {"src_key_padding_mask": _kpm(3, 5, pads)}
    if no_grad:
        with torch.no_grad(), serve.no_grad():
            _compare(ref, ours, [x], masks, grad=False)
    else:
        _compare(ref, ours, [x], masks)


@needs_torch
def test_encoder_eval_padding_not_at_the_end_stays_dense():
    ref, ours = _pair(_encoder(batch_first=True))
    ref.eval(), ours.eval()
    (x,) = _arrays((2, 5, D))
    kpm = np.array([[False, True, False, False, True], [False] * 5])
    with torch.no_grad(), serve.no_grad():
        _compare(ref, ours, [x], {"src_key_padding_mask": kpm}, grad=False)
        _compare(ref, ours, [x], {"src_key_padding_mask": _kpm(2, 5, [1, 0]), "mask": _causal(5)}, grad=False)


@needs_torch
@pytest.mark.parametrize("kw", [{}, {"norm_first": True, "batch_first": True}])
def test_encoder_training_with_masks(kw):
    ref, ours = _pair(_encoder(**kw))
    shape = (3, 5, D) if kw.get("batch_first") else (5, 3, D)
    (x,) = _arrays(shape)
    _compare(ref, ours, [x], {"mask": _causal(5), "src_key_padding_mask": _kpm(3, 5, [0, 1, 2])})
    _compare(ref, ours, [x], {"mask": _causal(5)}, is_causal=True)


# ---- decoder ---------------------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("kw", [{}, {"batch_first": True, "norm_first": True}, {"activation": "gelu"}])
@pytest.mark.parametrize("masked", [False, True])
def test_decoder_layer(kw, masked):
    ref, ours = _pair(lambda lib: lib.nn.TransformerDecoderLayer(D, HEADS, FF, dropout=0.0, **kw))
    bf = kw.get("batch_first", False)
    tgt, mem = _arrays((2, 4, D) if bf else (4, 2, D), (2, 6, D) if bf else (6, 2, D))
    masks = {}
    if masked:
        masks = {"tgt_mask": _causal(4), "memory_mask": np.random.default_rng(3).random((4, 6)) < 0.3,
                 "tgt_key_padding_mask": _kpm(2, 4, [0, 1]), "memory_key_padding_mask": _kpm(2, 6, [2, 0])}  # fmt: skip
        masks["memory_mask"][:, 0] = False
    _compare(ref, ours, [tgt, mem], masks)


@needs_torch
def test_decoder_stack_causal():
    def make(lib):
        layer = lib.nn.TransformerDecoderLayer(D, HEADS, FF, dropout=0.0, batch_first=True)
        return lib.nn.TransformerDecoder(layer, 2, norm=lib.nn.LayerNorm(D))

    ref, ours = _pair(make)
    tgt, mem = _arrays((2, 4, D), (2, 6, D))
    _compare(ref, ours, [tgt, mem], {"tgt_mask": _causal(4)}, tgt_is_causal=True)
    _compare(ref, ours, [tgt, mem], {"tgt_mask": _causal(4), "memory_key_padding_mask": _kpm(2, 6, [3, 0])})


# ---- Transformer ---------------------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer(batch_first):
    def make(lib):
        return lib.nn.Transformer(D, HEADS, 2, 1, FF, dropout=0.0, batch_first=batch_first)

    ref, ours = _pair(make)
    src, tgt = _arrays((2, 6, D) if batch_first else (6, 2, D), (2, 4, D) if batch_first else (4, 2, D))
    mask = ours.generate_square_subsequent_mask(4)
    assert_close(mask, torch.nn.Transformer.generate_square_subsequent_mask(4))
    _compare(ref, ours, [src, tgt], {"tgt_mask": mask.numpy(), "src_key_padding_mask": _kpm(2, 6, [0, 2]),
                                     "memory_key_padding_mask": _kpm(2, 6, [0, 2])})  # fmt: skip
    with pytest.raises(RuntimeError, match="the feature number of src and tgt must be equal to d_model"):
        ours(serve.randn(2, 2, D + 1), serve.randn(2, 2, D))
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        ours(serve.randn(3, 3, D), serve.randn(2, 2, D))


@needs_torch
def test_state_dict_keys_and_init():
    torch.manual_seed(0)
    ref = torch.nn.Transformer(D, HEADS, 2, 2, FF)
    ours = nn.Transformer(D, HEADS, 2, 2, FF)
    assert list(ours.state_dict()) == list(ref.state_dict())
    for (name, p), r in zip(ours.state_dict().items(), ref.state_dict().values()):
        assert tuple(p.shape) == tuple(r.shape), name
    w = ours.encoder.layers[0].linear1.weight.detach().numpy()  # xavier uniform: fan_in + fan_out = D + FF
    assert np.abs(w).max() <= np.sqrt(6 / (D + FF)) and w.std() > 0.1
    layer = nn.TransformerEncoderLayer(D, HEADS, FF)
    enc = nn.TransformerEncoder(layer, 3)
    assert enc.layers[0] is not layer and enc.layers[0].linear1.weight is not enc.layers[1].linear1.weight
    assert_close(enc.layers[2].linear1.weight, layer.linear1.weight)  # deep copies of the same layer


def test_activation_errors():
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        nn.TransformerEncoderLayer(D, HEADS, FF, activation="tanh")
    assert nn.TransformerEncoderLayer(D, HEADS, FF, activation="gelu").activation is F.gelu
    assert nn.TransformerEncoderLayer(D, HEADS, FF, activation=nn.GELU()).activation_relu_or_gelu == 2
