"""Matrix products: matmul (`@`), mm, mv, bmm, dot, outer, einsum.

Unlike elementwise operations, PyTorch does not promote dtypes in matrix products: both operands must
share a dtype. Half-precision products accumulate in float32 (in the backend).
"""

from __future__ import annotations

import math
import string
from typing import Any

from serve.tensor import function as fn
from serve.tensor.grad_mode import state
from serve.tensor.tensor import Tensor, _make

# PyTorch names dtypes by their C++ types in these messages
_CPP_NAMES = {"float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
              "int64": "long int", "int32": "int", "int16": "short int", "int8": "signed char",
              "uint8": "unsigned char", "bool": "bool", "complex64": "c10::complex<float>",
              "complex128": "c10::complex<double>"}  # fmt: skip


def _same_dtype(a: Tensor, b: Tensor) -> None:
    if a._dtype is not b._dtype:
        names = f"{_CPP_NAMES[a._dtype.name]} != {_CPP_NAMES[b._dtype.name]}"
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {names}")
    if a._device != b._device:
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"{a._device} and {b._device}!"
        )


def _check_shapes(a: Tensor, b: Tensor) -> None:
    """RuntimeError in PyTorch's words (which name the kernel matmul dispatches to) when a @ b is ill-shaped."""
    from serve.tensor.math_ops import broadcast_shapes

    da, db = a.ndim, b.ndim
    k_a, k_b = a.shape[-1], (b.shape[-2] if db > 1 else b.shape[0])
    if db <= 2:  # a plain product, or (da >= 3) a batch folded into rows
        if k_a == k_b:
            return
        rows = math.prod(a.shape[:-1])  # PyTorch folds the batch of a 3-D+ `a` into the rows of one product
        if da == 1 and db == 1:
            raise RuntimeError(
                f"inconsistent tensor size, expected tensor [{k_a}] and src [{k_b}] to have the same "
                f"number of elements, but got {k_a} and {k_b} elements respectively"
            )
        if db == 1:
            raise RuntimeError(f"size mismatch, got input ({rows}), mat ({rows}x{k_a}), vec ({k_b})")
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{k_a} and {k_b}x{b.shape[-1]})")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if k_a != k_b:
        n = math.prod(batch)
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: [{n}, {k_a}] but got: [{n}, {k_b}]."
        )


def matmul(input: Tensor, other: Tensor) -> Tensor:
    if not isinstance(other, Tensor):
        raise TypeError(f"matmul(): argument 'other' must be Tensor, not {type(other).__name__}")
    _same_dtype(input, other)
    if input.ndim == 0 or other.ndim == 0:
        raise RuntimeError(
            f"both arguments to matmul need to be at least 1D, but they are {input.ndim}D and {other.ndim}D"
        )
    _check_shapes(input, other)
    if state.enabled and (input._requires_grad or other._requires_grad):
        return fn.Matmul.apply(input, other)
    return _make(input._ops.matmul(input._data, other._data), input._dtype, input._device, input._ops)


def mm(input: Tensor, mat2: Tensor) -> Tensor:
    if input.ndim != 2:
        raise RuntimeError(f"self must be a matrix, got a {input.ndim}-D tensor")
    if mat2.ndim != 2:
        raise RuntimeError(f"mat2 must be a matrix, got a {mat2.ndim}-D tensor")
    return matmul(input, mat2)


def mv(input: Tensor, vec: Tensor) -> Tensor:
    if input.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got {input.ndim}, {vec.ndim}")
    if input.shape[1] != vec.shape[0]:
        raise RuntimeError(
            f"size mismatch, got input ({input.shape[0]}), mat ({input.shape[0]}x{input.shape[1]}), "
            f"vec ({vec.shape[0]})"
        )
    return matmul(input, vec)


def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    if input.ndim != 3:
        raise RuntimeError(f"batch1 must be a 3D tensor, got {input.ndim}D")
    if mat2.ndim != 3:
        raise RuntimeError(f"batch2 must be a 3D tensor, got {mat2.ndim}D")
    if input.shape[0] != mat2.shape[0] or input.shape[2] != mat2.shape[1]:
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: [{input.shape[0]}, {input.shape[2]}] "
            f"but got: [{mat2.shape[0]}, {mat2.shape[1]}]."
        )
    return matmul(input, mat2)


def dot(input: Tensor, tensor: Tensor) -> Tensor:
    if input.ndim != 1 or tensor.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.ndim}D and {tensor.ndim}D tensors")
    return matmul(input, tensor)


inner = dot


def outer(input: Tensor, vec2: Tensor) -> Tensor:
    return input.reshape(-1, 1) * vec2.reshape(1, -1)


ger = outer


def _expand_ellipsis(equation: str, operands: tuple[Tensor, ...]) -> str:
    """Rewrite `...` as explicit letters so every operand's subscripts name each of its dims."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        which = "more" if len(operands) > len(terms) else "fewer"
        raise RuntimeError(f"einsum(): {which} operands were provided than specified in the equation")
    used = set(eq) - set(".,->")
    spare = [c for c in string.ascii_letters if c not in used]
    n_ell = 0
    for term, op in zip(terms, operands):
        if "..." in term:
            n_ell = max(n_ell, op.ndim - (len(term) - 3))
    ell = "".join(spare[:n_ell])
    new_terms: list[str] = []
    for term, op in zip(terms, operands):
        if "..." in term:
            k = op.ndim - (len(term) - 3)
            term = term.replace("...", ell[n_ell - k :])
        if len(term) != op.ndim:
            raise RuntimeError(
                f"einsum(): the number of subscripts in the equation ({len(term)}) does not match the number of "
                f"dimensions ({op.ndim}) for operand {len(new_terms)}"
                + (" and no ellipsis was given" if "..." not in term else "")
            )
        new_terms.append(term)
    if arrow:
        out = rhs.replace("...", ell)
    else:  # implicit output: the ellipsis dims, then letters used once, in alphabetical order
        counts: dict[str, int] = {}
        for c in "".join(new_terms):
            counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    return ",".join(new_terms) + "->" + out


def einsum(equation: str, *operands: Any) -> Tensor:
    """Einstein summation (`torch.einsum`); operands as varargs or one list."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    ops_t: tuple[Tensor, ...] = operands
    eq = _expand_ellipsis(equation, ops_t)
    for op in ops_t[1:]:
        _same_dtype(ops_t[0], op)
    ref = ops_t[0]
    recording = state.enabled and any(t._requires_grad for t in ops_t)
    if recording:
        for term in eq.split("->")[0].split(","):
            if len(set(term)) != len(term):
                raise RuntimeError(
                    f"einsum: repeated subscripts within one operand ('{term}') are not differentiable here; "
                    "use diagonal()/trace first"
                )
        return fn.Einsum.apply(*ops_t, equation=eq)
    try:
        out = ref._ops.einsum(eq, *[t._data for t in ops_t])
    except ValueError as e:
        raise RuntimeError(f"einsum(): {e}") from None
    return _make(out, ref._dtype, ref._device, ref._ops)
