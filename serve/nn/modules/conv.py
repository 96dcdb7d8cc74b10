"""Convolution layers: `nn.Conv1d`, `nn.Conv2d`, `nn.ConvTranspose1d`, `nn.ConvTranspose2d`.

Constructor arguments, attributes (`_reversed_padding_repeated_twice` included), parameter shapes, the
kaiming-uniform init and `extra_repr` are PyTorch's, so checkpoints load unchanged and `print(model)` reads
the same. Non-zero padding modes pad with `F.pad` first, as PyTorch does.
"""

from __future__ import annotations

import math
from typing import Any

from serve.nn import init
from serve.nn.functional import conv as F
from serve.nn.functional.vision import pad
from serve.nn.module import Module
from serve.nn.parameter import Parameter
from serve.tensor.creation import empty
from serve.tensor.tensor import Tensor

__all__ = ["Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d"]

_PADDING_MODES = {"zeros", "reflect", "replicate", "circular"}


def _ntuple(value: Any, n: int) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


class _ConvNd(Module):
    """What every convolution layer shares: argument checks, parameters, init and repr."""

    _dims = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any, padding: Any,
                 dilation: Any, transposed: bool, output_padding: Any, groups: int, bias: bool, padding_mode: str,
                 device: Any = None, dtype: Any = None) -> None:  # fmt: skip
        super().__init__()
        n = self._dims
        kernel_size, stride, dilation = _ntuple(kernel_size, n), _ntuple(stride, n), _ntuple(dilation, n)
        _check_args(in_channels, out_channels, padding, stride, groups, padding_mode)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.dilation = kernel_size, stride, dilation
        self.padding: Any = padding if isinstance(padding, str) else _ntuple(padding, n)
        self.transposed, self.output_padding = transposed, _ntuple(output_padding, n)
        self.groups, self.padding_mode = groups, padding_mode
        self._reversed_padding_repeated_twice = _reversed_padding(self.padding, kernel_size, dilation)
        shape = (in_channels, out_channels // groups) if transposed else (out_channels, in_channels // groups)
        self.weight = Parameter(empty(*shape, *kernel_size, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # kaiming_uniform_(a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)), PyTorch's long-standing default
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def extra_repr(self) -> str:
        n = self._dims
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


def _check_args(in_channels: int, out_channels: int, padding: Any, stride: tuple, groups: int,
                padding_mode: str) -> None:  # fmt: skip
    if groups <= 0:
        raise ValueError("groups must be a positive integer")
    if in_channels % groups != 0:
        raise ValueError("in_channels must be divisible by groups")
    if out_channels % groups != 0:
        raise ValueError("out_channels must be divisible by groups")
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
        if padding == "same" and any(s != 1 for s in stride):
            raise ValueError("padding='same' is not supported for strided convolutions")
    if padding_mode not in _PADDING_MODES:
        raise ValueError(f"padding_mode must be one of {_PADDING_MODES}, but got padding_mode='{padding_mode}'")


def _reversed_padding(padding: Any, kernel_size: tuple, dilation: tuple) -> Any:
    """F.pad's argument (last dim first, before/after) for the non-zero padding modes."""
    if not isinstance(padding, str):
        return tuple(p for p in reversed(padding) for _ in range(2))
    out = [0, 0] * len(kernel_size)
    if padding == "same":  # the odd extra goes after, as in F.conv2d(padding="same")
        for d, k, i in zip(dilation, kernel_size, range(len(kernel_size) - 1, -1, -1)):
            total = d * (k - 1)
            out[2 * i], out[2 * i + 1] = total // 2, total - total // 2
    return out


class _Conv(_ConvNd):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None) -> None:  # fmt: skip
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, False, 0, groups, bias,
                         padding_mode, device, dtype)  # fmt: skip

    def _conv_forward(self, input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        conv = F.conv1d if self._dims == 1 else F.conv2d
        if self.padding_mode != "zeros":
            padded = pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return conv(padded, weight, bias, self.stride, 0, self.dilation, self.groups)
        return conv(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input: Tensor) -> Tensor:
        return self._conv_forward(input, self.weight, self.bias)


class Conv1d(_Conv):
    """1-d convolution over (N, C_in, L): weight (out_channels, in_channels / groups, kernel_size)."""

    _dims = 1


class Conv2d(_Conv):
    """2-d convolution over (N, C_in, H, W): weight (out_channels, in_channels / groups, kH, kW)."""

    _dims = 2


class _ConvTranspose(_ConvNd):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, groups: int = 1, bias: bool = True, dilation: Any = 1,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:  # fmt: skip
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, True, output_padding,
                         groups, bias, padding_mode, device, dtype)  # fmt: skip

    def _output_padding(self, input: Tensor, output_size: Any) -> tuple[int, ...]:
        """The output_padding that makes the output `output_size` (PyTorch's rule and error)."""
        if output_size is None:
            return self.output_padding
        n = self._dims
        lead = 2 if input.ndim == n + 2 else 1
        size = list(output_size)
        if len(size) == lead + n:
            size = size[lead:]
        if len(size) != n:
            raise ValueError(f"ConvTranspose{n}D: for {input.ndim}D input, output_size must have {n} or {lead + n} "
                             f"elements (got {len(output_size)})")  # fmt: skip
        low = [(input.shape[lead + d] - 1) * self.stride[d] - 2 * self.padding[d]
               + self.dilation[d] * (self.kernel_size[d] - 1) + 1 for d in range(n)]  # fmt: skip
        high = [lo + s - 1 for lo, s in zip(low, self.stride)]
        if any(not lo <= s <= hi for s, lo, hi in zip(size, low, high)):
            raise ValueError(f"requested an output size of {output_size}, but valid sizes range from {low} to {high} "
                             f"(for an input of {input.shape[lead:]})")  # fmt: skip
        return tuple(s - lo for s, lo in zip(size, low))

    def forward(self, input: Tensor, output_size: Any = None) -> Tensor:
        conv = F.conv_transpose1d if self._dims == 1 else F.conv_transpose2d
        output_padding = self._output_padding(input, output_size)
        return conv(input, self.weight, self.bias, self.stride, self.padding, output_padding, self.groups,
                    self.dilation)  # fmt: skip


class ConvTranspose1d(_ConvTranspose):
    """1-d transposed convolution: weight (in_channels, out_channels / groups, kernel_size)."""

    _dims = 1


class ConvTranspose2d(_ConvTranspose):
    """2-d transposed convolution: weight (in_channels, out_channels / groups, kH, kW)."""

    _dims = 2
