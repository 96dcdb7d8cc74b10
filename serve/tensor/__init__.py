"""The tensor runtime: `Tensor`, dtypes, the primitives with their gradients, autograd, and every op."""

from serve.tensor import methods as _methods  # binds the methods and operators to Tensor
from serve.tensor.tensor import Size, Tensor

__all__ = ["Size", "Tensor"]
