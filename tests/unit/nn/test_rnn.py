"""nn.RNN, nn.LSTM, nn.GRU and the cells against PyTorch with the same weights: outputs, states, gradients."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from serve import nn
from tests.helpers import assert_close, needs_torch, torch

RTOL, ATOL = 1e-5, 1e-5
GRAD_TOL = 1e-4


def _pair(cls: str, *args, seed=0, **kw):
    torch.manual_seed(seed)
    ref = getattr(torch.nn, cls)(*args, **kw)
    ours = getattr(nn, cls)(*args, **kw)
    ours.load_state_dict({k: serve.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    return ref, ours


def _arrays(*shapes, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _flat(out):
    """(output, h) or (output, (h, c)) as a flat list."""
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return [out]


def _compare(ref, ours, x, states=None, grad=True):
    """Run both on x (and initial states) under no_grad and with grad; compare outputs and input gradients."""

    def call(lib, mod, arrays, requires_grad):
        ts = [lib.tensor(a, requires_grad=requires_grad) for a in arrays]
        hx = None if states is None else (ts[1] if len(ts) == 2 else (ts[1], ts[2]))
        return ts, _flat(mod(ts[0], hx))

    arrays = [x] + ([] if states is None else list(states))
    with torch.no_grad(), serve.no_grad():
        _, t_outs = call(torch, ref, arrays, False)
        _, s_outs = call(serve, ours, arrays, False)
    for s, t in zip(s_outs, t_outs):
        assert_close(s, t, atol=ATOL, rtol=RTOL)
    if not grad:
        return
    t_in, t_outs = call(torch, ref, arrays, True)
    s_in, s_outs = call(serve, ours, arrays, True)
    for s, t in zip(s_outs, t_outs):
        assert_close(s, t, atol=ATOL, rtol=RTOL)
    cots = _arrays(*[tuple(t.shape) for t in t_outs], seed=7)
    sum((t * torch.tensor(c)).sum() for t, c in zip(t_outs, cots)).backward()
    sum((s * serve.tensor(c)).sum() for s, c in zip(s_outs, cots)).backward()
    for s, t in zip(s_in, t_in):
        assert_close(s.grad, t.grad, atol=GRAD_TOL, rtol=GRAD_TOL)
    for name, p in ref.named_parameters():
        assert_close(dict(ours.named_parameters())[name].grad, p.grad, atol=GRAD_TOL, rtol=GRAD_TOL)


CONFIGS = [
    {},
    {"batch_first": True},
    {"num_layers": 2, "bidirectional": True},
    {"num_layers": 3, "batch_first": True, "bidirectional": True},
    {"bias": False, "num_layers": 2},
]


@needs_torch
@pytest.mark.parametrize("cls", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("kw", CONFIGS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "default")
def test_recurrent_layers(cls, kw):
    ref, ours = _pair(cls, 4, 5, **kw)
    shape = (3, 6, 4) if kw.get("batch_first") else (6, 3, 4)
    (x,) = _arrays(shape)
    _compare(ref, ours, x)


@needs_torch
def test_rnn_relu():
    ref, ours = _pair("RNN", 4, 5, nonlinearity="relu", num_layers=2)
    _compare(ref, ours, *_arrays((6, 3, 4)))


@needs_torch
@pytest.mark.parametrize("cls", ["RNN", "GRU"])
def test_initial_state(cls):
    ref, ours = _pair(cls, 4, 5, num_layers=2, bidirectional=True, batch_first=True)
    x, h0 = _arrays((3, 6, 4), (4, 3, 5))
    _compare(ref, ours, x, (h0,))


@needs_torch
@pytest.mark.parametrize("proj_size", [0, 3])
def test_lstm_initial_states_and_projection(proj_size):
    ref, ours = _pair("LSTM", 4, 5, num_layers=2, bidirectional=True, proj_size=proj_size)
    x, h0, c0 = _arrays((6, 3, 4), (4, 3, proj_size or 5), (4, 3, 5))
    _compare(ref, ours, x, (h0, c0))


@needs_torch
@pytest.mark.parametrize("cls", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_unbatched_input(cls, batch_first):
    ref, ours = _pair(cls, 4, 5, num_layers=2, bidirectional=True, batch_first=batch_first)
    x, h0, c0 = _arrays((6, 4), (4, 5), (4, 5))
    _compare(ref, ours, x, (h0, c0) if cls == "LSTM" else (h0,))


@needs_torch
def test_dropout_between_layers_only_in_training():
    ref, ours = _pair("LSTM", 4, 5, num_layers=3, dropout=0.5)
    ref.eval(), ours.eval()
    (x,) = _arrays((6, 3, 4))
    _compare(ref, ours, x, grad=False)  # eval: no dropout, same as PyTorch
    ours.train()
    sx = serve.tensor(x)
    with serve.no_grad():
        a, b = ours(sx)[0].numpy(), ours(sx)[0].numpy()
        assert not np.allclose(a, b)
        ours.eval()
        assert_close(ours(sx)[0], ref(torch.tensor(x))[0], atol=ATOL, rtol=RTOL)


@needs_torch
@pytest.mark.parametrize("cls", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("kw", [{}, {"num_layers": 2, "bidirectional": True}, {"bias": False}, {"proj_size": 2}])
def test_state_dict_keys_and_init(cls, kw):
    if "proj_size" in kw and cls != "LSTM":
        with pytest.raises(TypeError, match="proj_size"):
            getattr(nn, cls)(4, 5, **kw)
        with pytest.raises(ValueError, match="proj_size argument is only supported for LSTM"):
            nn.RNNBase("GRU", 4, 5, **kw)
        return
    ref = getattr(torch.nn, cls)(4, 5, **kw)
    ours = getattr(nn, cls)(4, 5, **kw)
    assert list(ours.state_dict()) == list(ref.state_dict())
    for (name, p), r in zip(ours.state_dict().items(), ref.state_dict().values()):
        assert tuple(p.shape) == tuple(r.shape), name
        w = p.numpy()
        assert np.abs(w).max() <= 1 / np.sqrt(5) and w.std() > 0.05  # uniform(-1/sqrt(hidden), 1/sqrt(hidden))
    assert [[tuple(p.shape) for p in ws] for ws in ours.all_weights] == [
        [tuple(p.shape) for p in ws] for ws in ref.all_weights
    ]
    assert repr(ours) == repr(ref)


# ---- cells ----------------------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("cls,kw", [("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu"}), ("LSTMCell", {}),
                                    ("GRUCell", {}), ("GRUCell", {"bias": False})])  # fmt: skip
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("with_state", [True, False])
def test_cells(cls, kw, batched, with_state):
    ref, ours = _pair(cls, 4, 5, **kw)
    lead = (3,) if batched else ()
    x, h, c = _arrays((*lead, 4), (*lead, 5), (*lead, 5))
    states = None if not with_state else ((h, c) if cls == "LSTMCell" else (h,))
    _compare(ref, ours, x, states)


# ---- errors ---------------------------------------------------------------------------------------------
def test_constructor_errors():
    with pytest.raises(ValueError, match="Unknown nonlinearity"):
        nn.RNN(4, 5, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="dropout should be a number in range"):
        nn.GRU(4, 5, dropout=1.5)
    with pytest.raises(ValueError, match="hidden_size must be greater than zero"):
        nn.LSTM(4, 0)
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        nn.LSTM(4, 5, proj_size=5)
    with pytest.raises(TypeError, match="input_size should be of type int"):
        nn.LSTM(4.0, 5)
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.LSTM(4, 5, dropout=0.2)


def test_forward_errors():
    lstm = nn.LSTM(4, 5, num_layers=2)
    with pytest.raises(ValueError, match="LSTM: Expected input to be 2D or 3D, got 4D instead"):
        lstm(serve.randn(1, 2, 3, 4))
    with pytest.raises(RuntimeError, match=r"input.size\(-1\) must be equal to input_size. Expected 4, got 3"):
        lstm(serve.randn(6, 2, 3))
    with pytest.raises(ValueError, match="does not match weight dtype"):
        lstm(serve.randn(6, 2, 4).double())
    with pytest.raises(RuntimeError, match=r"Expected hidden\[0\] size \(2, 2, 5\), got \[1, 2, 5\]"):
        lstm(serve.randn(6, 2, 4), (serve.zeros(1, 2, 5), serve.zeros(2, 2, 5)))
    with pytest.raises(RuntimeError, match="For batched 3-D input, hx should also be 3-D"):
        nn.GRU(4, 5)(serve.randn(6, 2, 4), serve.zeros(2, 5))
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(1, 2, 5\), got \[1, 3, 5\]"):
        nn.RNN(4, 5)(serve.randn(6, 2, 4), serve.zeros(1, 3, 5))
    with pytest.raises(RuntimeError, match="input has inconsistent input_size: got 3 expected 4"):
        nn.GRUCell(4, 5)(serve.randn(2, 3))
    with pytest.raises(RuntimeError, match="Input batch size 2 doesn't match hidden0 batch size 3"):
        nn.RNNCell(4, 5)(serve.randn(2, 4), serve.zeros(3, 5))
