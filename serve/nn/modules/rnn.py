"""Recurrent layers: RNN, LSTM, GRU and the single-step RNNCell, LSTMCell, GRUCell, as in `torch.nn.modules.rnn`.

Parameter names, shapes, order and init are PyTorch's (`weight_ih_l0`, `bias_hh_l1_reverse`, ...; uniform in
+-1/sqrt(hidden_size)), so a PyTorch checkpoint loads unchanged. The recurrence itself lives in
`serve.nn.functional.rnn`. PackedSequence inputs are not supported.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from serve.nn import init
from serve.nn.functional import rnn as _rnn
from serve.nn.module import Module
from serve.nn.parameter import Parameter
from serve.tensor.creation import empty, zeros
from serve.tensor.tensor import Tensor

__all__ = ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNBase", "RNNCell", "RNNCellBase"]

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
_SLOTS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")


def _reset_uniform(module: Module, hidden_size: int) -> None:
    stdv = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
    for weight in module.parameters():
        init.uniform_(weight, -stdv, stdv)


class RNNBase(Module):
    """The stacked (optionally bidirectional) recurrence shared by RNN, LSTM and GRU."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device: Any = None, dtype: Any = None) -> None:  # fmt: skip
        super().__init__()
        _check_config(mode, input_size, hidden_size, num_layers, bias, batch_first, dropout, proj_size)
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        num_directions = 2 if bidirectional else 1
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size if proj_size > 0 else hidden_size
        self._flat_weights_names: list[str] = []
        self._all_weights: list[list[str]] = []
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else real_hidden * num_directions
            for direction in range(num_directions):
                shapes: dict[str, tuple[int, ...]] = {"weight_ih": (gate_size, layer_input),
                                                       "weight_hh": (gate_size, real_hidden)}  # fmt: skip
                if bias:
                    shapes.update(bias_ih=(gate_size,), bias_hh=(gate_size,))
                if proj_size > 0:
                    shapes["weight_hr"] = (proj_size, hidden_size)
                suffix = f"_l{layer}" + ("_reverse" if direction == 1 else "")
                names = [name + suffix for name in shapes]
                for name, shape in zip(names, shapes.values()):
                    setattr(self, name, Parameter(empty(shape, device=device, dtype=dtype)))
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_uniform(self, self.hidden_size)

    def flatten_parameters(self) -> None:
        """Kept for PyTorch compatibility: it compacts weights for cuDNN, which serve does not use."""

    @property
    def all_weights(self) -> list[list[Parameter]]:
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    def _layer_weights(self) -> list[_rnn.Weights]:
        """(weight_ih, weight_hh, bias_ih, bias_hh, weight_hr) per layer and direction, None where absent."""
        out = []
        for names in self._all_weights:
            by_slot = {name.rsplit("_l", 1)[0]: getattr(self, name) for name in names}
            out.append(tuple(by_slot.get(slot) for slot in _SLOTS))
        return out  # type: ignore[return-value]

    def _run(self, input: Tensor, hx: tuple[Tensor, ...]) -> tuple[Tensor, tuple[Tensor, ...]]:
        return _rnn.rnn(self.mode, input, hx, self._layer_weights(), self.num_layers, self.dropout, self.training,
                        self.bidirectional, self.batch_first)  # fmt: skip

    def _batched(self, input: Tensor) -> tuple[Tensor, bool]:
        """The input as a batch (unbatched (T, I) gains a batch dim), checked against the weights."""
        name = {"RNN_TANH": "RNN", "RNN_RELU": "RNN"}.get(self.mode, self.mode)
        if input.ndim not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.ndim}D instead")
        weight = getattr(self, self._flat_weights_names[0])
        if input.dtype != weight.dtype:
            raise ValueError(
                f"RNN input dtype ({input.dtype}) does not match weight dtype ({weight.dtype}). Convert input: "
                f"input.to({weight.dtype}), or convert model: model.to({input.dtype})"
            )
        if input.shape[-1] != self.input_size:
            raise RuntimeError(
                f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got {input.shape[-1]}"
            )
        batched = input.ndim == 3
        return (input if batched else input.unsqueeze(0 if self.batch_first else 1)), batched

    def _state(self, input: Tensor, hx: Tensor | None, size: int, batched: bool, which: str) -> Tensor:
        """The initial state `hx` (zeros when None) as (layers * directions, B, size), checked."""
        batch = input.shape[0 if self.batch_first else 1]
        expected = (self.num_layers * (2 if self.bidirectional else 1), batch, size)
        if hx is None:
            return zeros(expected, dtype=input.dtype, device=input.device)
        dims = 3 if batched else 2
        if hx.ndim != dims:
            kind = "batched 3-D" if batched else "unbatched 2-D"
            raise RuntimeError(f"For {kind} input, {which} should also be {dims}-D but got {hx.ndim}-D tensor")
        hx = hx if batched else hx.unsqueeze(1)
        if tuple(hx.shape) != expected:
            label = {"hx": "hidden", "h0": "hidden[0]", "c0": "hidden[1]"}[which]
            raise RuntimeError(f"Expected {label} size {expected}, got {list(hx.shape)}")
        return hx

    def _unbatch(self, output: Tensor, states: tuple[Tensor, ...], batched: bool) -> tuple[Tensor, tuple]:
        if batched:
            return output, states
        return output.squeeze(0 if self.batch_first else 1), tuple(s.squeeze(1) for s in states)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s


def _check_config(mode: str, input_size: Any, hidden_size: Any, num_layers: int, bias: Any, batch_first: Any,
                  dropout: Any, proj_size: int) -> None:  # fmt: skip
    if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout <= 1:
        raise ValueError(
            "dropout should be a number in range [0, 1] representing the probability of an element being zeroed"
        )
    if dropout > 0 and num_layers == 1:
        warnings.warn(
            "dropout option adds dropout after all but last recurrent layer, so non-zero dropout expects "
            f"num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
            stacklevel=4,
        )
    for name, value, kind in (("bias", bias, bool), ("batch_first", batch_first, bool), ("input_size", input_size, int),
                              ("hidden_size", hidden_size, int)):  # fmt: skip
        if not isinstance(value, kind):
            raise TypeError(f"{name} should be of type {kind.__name__}, got: {type(value).__name__}")
    if input_size <= 0:
        raise ValueError("input_size must be greater than zero")
    if hidden_size <= 0:
        raise ValueError("hidden_size must be greater than zero")
    if num_layers <= 0:
        raise ValueError("num_layers must be greater than zero")
    if proj_size < 0:
        raise ValueError("proj_size should be a positive integer or zero to disable projections")
    if proj_size >= hidden_size:
        raise ValueError("proj_size has to be smaller than hidden_size")
    if proj_size and mode != "LSTM":
        raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")


class RNN(RNNBase):
    """Elman RNN: h_t = nonlinearity(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh), nonlinearity tanh or relu."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device: Any = None, dtype: Any = None) -> None:  # fmt: skip
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__("RNN_" + nonlinearity.upper(), input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, device=device, dtype=dtype)  # fmt: skip
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        x, batched = self._batched(input)
        h0 = self._state(x, hx, self.hidden_size, batched, "hx")
        output, (h_n,) = self._unbatch(*self._run(x, (h0,)), batched)
        return output, h_n


class LSTM(RNNBase):
    """LSTM with PyTorch's gate order (input, forget, cell, output) and optional projection (`proj_size`)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device: Any = None, dtype: Any = None) -> None:  # fmt: skip
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device=device, dtype=dtype)  # fmt: skip

    def forward(self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        x, batched = self._batched(input)
        h0, c0 = (None, None) if hx is None else hx
        h0 = self._state(x, h0, self.proj_size or self.hidden_size, batched, "h0")
        c0 = self._state(x, c0, self.hidden_size, batched, "c0")
        output, (h_n, c_n) = self._unbatch(*self._run(x, (h0, c0)), batched)
        return output, (h_n, c_n)


class GRU(RNNBase):
    """GRU with PyTorch's gate order (reset, update, new); the reset gate multiplies (W_hn h + b_hn)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device: Any = None, dtype: Any = None) -> None:  # fmt: skip
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)  # fmt: skip

    def forward(self, input: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        x, batched = self._batched(input)
        h0 = self._state(x, hx, self.hidden_size, batched, "hx")
        output, (h_n,) = self._unbatch(*self._run(x, (h0,)), batched)
        return output, h_n


class RNNCellBase(Module):
    """weight_ih (chunks * hidden, input), weight_hh (chunks * hidden, hidden), optional biases."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int, device: Any = None,
                 dtype: Any = None) -> None:  # fmt: skip
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        kw = {"device": device, "dtype": dtype}
        self.weight_ih = Parameter(empty((num_chunks * hidden_size, input_size), **kw))
        self.weight_hh = Parameter(empty((num_chunks * hidden_size, hidden_size), **kw))
        if bias:
            self.bias_ih = Parameter(empty(num_chunks * hidden_size, **kw))
            self.bias_hh = Parameter(empty(num_chunks * hidden_size, **kw))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_uniform(self, self.hidden_size)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _step(self, mode: str, input: Tensor, hx: tuple[Tensor | None, ...]) -> tuple[Tensor, ...]:
        """One step on batched or unbatched input; missing states start at zeros."""
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        if x.shape[1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {x.shape[1]} expected {self.input_size}")
        states = tuple(self._cell_state(x, h, batched, i) for i, h in enumerate(hx))
        out = _rnn.cell(mode, x, states, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return out if batched else tuple(s.squeeze(0) for s in out)

    def _cell_state(self, x: Tensor, h: Tensor | None, batched: bool, index: int) -> Tensor:
        if h is None:
            return zeros((x.shape[0], self.hidden_size), dtype=x.dtype, device=x.device)
        if h.ndim not in (1, 2):
            raise ValueError(f"{type(self).__name__}: Expected hidden to be 1D or 2D, got {h.ndim}D instead")
        h = h if batched else h.unsqueeze(0)
        if h.shape[0] != x.shape[0]:
            raise RuntimeError(f"Input batch size {x.shape[0]} doesn't match hidden{index} batch size {h.shape[0]}")
        if h.shape[1] != self.hidden_size:
            raise RuntimeError(
                f"hidden{index} has inconsistent hidden_size: got {h.shape[1]}, expected {self.hidden_size}"
            )
        return h


class RNNCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device: Any = None, dtype: Any = None) -> None:  # fmt: skip
        super().__init__(input_size, hidden_size, bias, num_chunks=1, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        return self._step("RNN_" + self.nonlinearity.upper(), input, (hx,))[0]


class LSTMCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:  # fmt: skip
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device, dtype=dtype)

    def forward(self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        h, c = self._step("LSTM", input, (None, None) if hx is None else tuple(hx))
        return h, c


class GRUCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:  # fmt: skip
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device, dtype=dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        return self._step("GRU", input, (hx,))[0]
