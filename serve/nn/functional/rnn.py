"""The recurrences behind nn.RNN, nn.LSTM, nn.GRU and their cells, with PyTorch's gate order and formulas.

One layer and direction costs one matrix product for the input projection of all time steps, then one
hidden-state product per step. The step functions run on Tensors when autograd records and on the backend's
arrays otherwise (serving), so a step pays no Tensor bookkeeping (see `_array_path`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from serve.nn.functional._array_path import math_for, records, unwrap, wrap
from serve.nn.functional.dropout import dropout as _dropout
from serve.tensor.tensor import Tensor

__all__: list[str] = []  # PyTorch keeps these out of torch.nn.functional; nn.RNN/LSTM/GRU and the cells use them

# per layer and direction: (weight_ih, weight_hh, bias_ih, bias_hh, weight_hr), absent ones None
Weights = tuple[Any, Any, Any, Any, Any]


def _sigmoid(m: Any, x: Any) -> Any:
    # the same function through tanh: on small per-step arrays this beats exp-based sigmoid by a third
    return m.tanh(x * 0.5) * 0.5 + 0.5


def _rnn_step(m: Any, act: str, xp: Any, state: tuple, w_hh_t: Any, b_hh: Any, w_hr_t: Any) -> tuple:
    # b_hh is folded into the input projection
    return (getattr(m, act)(xp + m.matmul(state[0], w_hh_t)),)


def _lstm_step(m: Any, act: str, xp: Any, state: tuple, w_hh_t: Any, b_hh: Any, w_hr_t: Any) -> tuple:
    h, c = state
    gates = xp + m.matmul(h, w_hh_t)  # ([2,] B, 4H): input, forget, cell, output
    n = c.shape[-1]
    s = _sigmoid(m, gates)  # the cell gate's sigmoid is unused: one call on the whole row is cheaper than two
    c = s[..., n : 2 * n] * c + s[..., :n] * m.tanh(gates[..., 2 * n : 3 * n])
    h = s[..., 3 * n :] * m.tanh(c)
    return (h if w_hr_t is None else m.matmul(h, w_hr_t), c)  # ([2,] B, proj_size) with a projection


def _gru_step(m: Any, act: str, xp: Any, state: tuple, w_hh_t: Any, b_hh: Any, w_hr_t: Any) -> tuple:
    h = state[0]
    hp = m.matmul(h, w_hh_t)  # ([2,] B, 3H): reset, update, new
    if b_hh is not None:
        hp = hp + b_hh  # kept out of the input projection: the reset gate multiplies W_hn h + b_hn
    n = h.shape[-1]
    rz = _sigmoid(m, xp[..., : 2 * n] + hp[..., : 2 * n])
    new = m.tanh(xp[..., 2 * n :] + rz[..., :n] * hp[..., 2 * n :])
    return (new + rz[..., n:] * (h - new),)


_STEPS: dict[str, tuple[Callable[..., tuple], str]] = {
    "RNN_TANH": (_rnn_step, "tanh"),
    "RNN_RELU": (_rnn_step, "relu"),
    "LSTM": (_lstm_step, ""),
    "GRU": (_gru_step, ""),
}


def _input_projection(m: Any, mode: str, x: Any, w: Weights) -> Any:
    """x @ W_ih^T plus the biases that do not depend on the step, for all time steps in one product."""
    w_ih, _, b_ih, b_hh, _ = w
    bias = b_ih if b_ih is None or mode == "GRU" else b_ih + b_hh
    return m.linear(x, w_ih, bias)  # (T, B, G) or (B, T, G)


def _layer(m: Any, mode: str, x: Any, init: tuple, ws: list[Weights], tdim: int) -> tuple[Any, tuple]:
    """One layer over the sequence (time on axis `tdim`): (outputs, final states (dirs, B, H)).

    The two directions of a bidirectional layer run in one loop, stacked on a leading axis (the reverse one over
    the time-flipped sequence), so each step is one batched matrix product and one pass of elementwise operations.
    """
    step, act = _STEPS[mode]
    both = len(ws) == 2
    xps = [_input_projection(m, mode, x, w) for w in ws]  # (T, B, G) or (B, T, G)
    # contiguous transposes, made once per call: BLAS multiplies a small h by them ~3x faster than by a view
    w_hh_t = _stacked(m, [m.ascontiguousarray(w[1].T) for w in ws])  # ([2,] H, G)
    w_hr_t = None if ws[0][4] is None else _stacked(m, [m.ascontiguousarray(w[4].T) for w in ws])
    b_hh = _stacked(m, [w[3] for w in ws]) if mode == "GRU" and ws[0][3] is not None else None
    if both:
        xp = m.stack([xps[0], m.flip(xps[1], (tdim,))], 0)  # (2, T, B, G) or (2, B, T, G)
        b_hh = None if b_hh is None else b_hh.reshape(2, 1, -1)  # (2, 1, G): broadcast over the batch
        state = init
    else:
        xp, state = xps[0], tuple(s[0] for s in init)
    lead = (slice(None),) * (tdim + both)  # indexes the time axis
    outs = []
    for t in range(x.shape[tdim]):
        state = step(m, act, xp[(*lead, t)], state, w_hh_t, b_hh, w_hr_t)
        outs.append(state[0])
    out = m.stack(outs, tdim + both)
    if both:
        out = m.concatenate([out[0], m.flip(out[1], (tdim,))], -1)  # (.., 2 * H): forward then reverse
    return out, (state if both else tuple(s[None] for s in state))


def _stacked(m: Any, arrays: list[Any]) -> Any:
    return arrays[0] if len(arrays) == 1 else m.stack(arrays, 0)


def rnn(
    mode: str,
    input: Tensor,
    hx: Sequence[Tensor],
    weights: Sequence[Weights],
    num_layers: int,
    dropout: float,
    training: bool,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """A multi-layer recurrence on batched input: (output, final states), each state (layers * dirs, B, H).

    `mode` is RNN_TANH, RNN_RELU, LSTM or GRU; `hx` holds the initial states ((h0,) or (h0, c0)); `weights`
    has one entry per layer and direction, in PyTorch's order (layer 0 forward, layer 0 reverse, ...).
    """
    drop = dropout > 0.0 and training and num_layers > 1
    on_arrays = not drop and not records(input, *hx, *(p for w in weights for p in w))
    m = math_for(on_arrays, input)
    x = unwrap(input, on_arrays)
    init = [unwrap(s, on_arrays) for s in hx]
    ws = [tuple(unwrap(p, on_arrays) for p in w) for w in weights]
    tdim = 1 if batch_first else 0
    dirs = 2 if bidirectional else 1
    finals: list[tuple] = []
    for layer in range(num_layers):
        k = layer * dirs
        x, state = _layer(m, mode, x, tuple(s[k : k + dirs] for s in init), ws[k : k + dirs], tdim)
        finals.append(state)
        if drop and layer < num_layers - 1:
            x = _dropout(x, dropout, training=True)
    states = tuple(m.concatenate([f[i] for f in finals], 0) for i in range(len(init)))  # (layers * dirs, B, H)
    if not on_arrays:
        return x, states
    return wrap(x, input), tuple(wrap(s, input) for s in states)


def cell(mode: str, input: Tensor, hx: Sequence[Tensor], w_ih: Tensor, w_hh: Tensor,
         b_ih: Tensor | None, b_hh: Tensor | None) -> tuple[Tensor, ...]:  # fmt: skip
    """One step of an RNN/LSTM/GRU cell on batched input (B, I): the new state ((h,) or (h, c))."""
    weights: Weights = (w_ih, w_hh, b_ih, b_hh, None)
    on_arrays = not records(input, *hx, w_ih, w_hh, b_ih, b_hh)
    m = math_for(on_arrays, input)
    w: Any = tuple(unwrap(p, on_arrays) for p in weights)
    step, act = _STEPS[mode]
    xp = _input_projection(m, mode, unwrap(input, on_arrays), w)
    state = step(m, act, xp, tuple(unwrap(s, on_arrays) for s in hx), w[1].T, w[3] if mode == "GRU" else None, None)
    return tuple(wrap(s, input) for s in state) if on_arrays else state
