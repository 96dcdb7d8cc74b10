"""What a fused layer writes after its product: which activations fuse, and the numpy form of bias + activation.

An activation module fuses into the convolution or linear layer before it when it is one of `ACTIVATIONS` (the
ones the native kernels compute in their epilogue, and PyTorch's usual conv/linear followers). The numpy kernels
add the bias in place and then run the activation module itself, so their numbers are eager's to the last bit.
"""

from __future__ import annotations

import numpy as np

from serve import nn
from serve.backend import cpu_threads
from serve.nn.module import Module
from serve.tensor.tensor import Tensor, _make

__all__ = ["activation_name", "add_bias_", "apply_activation"]


def activation_name(module: Module) -> str | None:
    """The epilogue name of an activation module the kernels can fuse, or None."""
    if type(module) is nn.ReLU:
        return "relu"
    if type(module) is nn.ReLU6:
        return "relu6"
    if type(module) is nn.GELU:
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(module.approximate)
    if type(module) is nn.SiLU:
        return "silu"
    if type(module) is nn.Hardswish:
        return "hardswish"
    if type(module) is nn.Sigmoid:
        return "sigmoid"
    return None


def add_bias_(y: np.ndarray, bias: np.ndarray | None, channel_axis: int) -> None:
    """y += bias along `channel_axis`, in place, the lanes taking whole samples of a big y."""
    if bias is None:
        return
    if channel_axis == y.ndim - 1:
        b = bias  # broadcasts along the last axis as it is
    else:
        shape = [1] * y.ndim
        shape[channel_axis] = -1
        b = bias.reshape(shape)
    if y.nbytes < cpu_threads.SPLIT_BYTES or y.shape[0] < 2:
        np.add(y, b, out=y)
        return
    cpu_threads.parallel(lambda i0, i1: np.add(y[i0:i1], b, out=y[i0:i1]), cpu_threads.spans(y.shape[0]))


def apply_activation(y: Tensor, module: Module | None) -> Tensor:
    """The activation module on y (eager's own code), or y itself."""
    return y if module is None else module(y)


def wrap(data: np.ndarray, like: Tensor) -> Tensor:
    return _make(data, like._dtype, like._device, like._ops)
