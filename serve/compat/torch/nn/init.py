"""`torch.nn.init` names beyond serve.nn.init (which `torch.nn.init` is under the alias; these join it).

sparse_(tensor, sparsity, std=0.01)   torch's sparse initialization of a 2-D tensor: N(0, std) values with
                                      ceil(sparsity * rows) zeros in each column (transformers' init tables
                                      name it; a loaded model's weights overwrite it)
uniform, normal, constant, xavier_uniform, xavier_normal, kaiming_uniform, kaiming_normal
                                      torch's deprecated names of the in-place initializers (a FutureWarning,
                                      then the `_` one); transformers 4.x's init table names them
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from serve.nn import init as _init
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


def _deprecated(name: str) -> Callable[..., Any]:
    inplace = getattr(_init, name + "_")

    def initializer(*args: Any, **kwargs: Any) -> Any:
        warnings.warn(f"`nn.init.{name}` is now deprecated in favor of `nn.init.{name}_`.", FutureWarning,
                      stacklevel=2)  # fmt: skip
        return inplace(*args, **kwargs)

    initializer.__name__ = initializer.__qualname__ = name
    return initializer


uniform = _deprecated("uniform")
normal = _deprecated("normal")
constant = _deprecated("constant")
xavier_uniform = _deprecated("xavier_uniform")
xavier_normal = _deprecated("xavier_normal")
kaiming_uniform = _deprecated("kaiming_uniform")
kaiming_normal = _deprecated("kaiming_normal")
