"""`torch.nn.init` names beyond serve.nn.init (which `torch.nn.init` is under the alias; these join it).

sparse_(tensor, sparsity, std=0.01)   torch's sparse initialization of a 2-D tensor: N(0, std) values with
                                      ceil(sparsity * rows) zeros in each column (transformers' init tables
                                      name it; a loaded model's weights overwrite it)
"""

from __future__ import annotations

import math

import numpy as np

from serve.tensor.creation import from_numpy
from serve.tensor.grad_mode import no_grad
from serve.tensor.tensor import Tensor


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01, generator: object = None) -> Tensor:
    if tensor.ndim != 2:
        raise ValueError(f"sparse_ takes a 2-D tensor, got {tensor.ndim} dimensions")
    rows, cols = tensor.shape
    rng = np.random.default_rng()
    values = rng.normal(0.0, std, (rows, cols))
    zeros = math.ceil(sparsity * rows)
    for column in range(cols):
        values[rng.permutation(rows)[:zeros], column] = 0.0
    with no_grad():
        tensor.copy_(from_numpy(values.astype(tensor.dtype.np)))
    return tensor


__all__ = ["sparse_"]
