"""Matrix products with a scaled sum, PyTorch's names, composed from matmul, mul and add (autograd from theirs):

    addmm(input, mat1, mat2, beta=1, alpha=1)   beta * input + alpha * (mat1 @ mat2)   (n, m) = (n, k) @ (k, m)
    baddbmm(input, b1, b2, beta=1, alpha=1)     the same per batch               (B, n, m) = (B, n, k) @ (B, k, m)

transformers' GPT-2 `Conv1D` layer is `torch.addmm(bias, x, weight)`. As in torch, beta=0 ignores input (NaNs
in it do not propagate).
"""

from __future__ import annotations

from typing import Any

from serve.tensor.linalg import bmm, mm
from serve.tensor.math_ops import add, mul
from serve.tensor.tensor import Tensor


def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return _scaled_sum(input, mm(mat1, mat2), beta, alpha)  # (n, m)


def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return _scaled_sum(input, bmm(batch1, batch2), beta, alpha)  # (B, n, m)


def _scaled_sum(input: Tensor, product: Tensor, beta: Any, alpha: Any) -> Tensor:
    if alpha != 1:
        product = mul(product, alpha)
    if beta == 0:
        return product
    return add(product, input if beta == 1 else mul(input, beta))
