"""Matrix products: matmul (`@`), mm, mv, bmm, dot, outer, einsum.

Unlike elementwise operations, PyTorch does not promote dtypes in matrix products: both operands must
share a dtype. Half-precision products accumulate in float32 (in the backend).
"""

from __future__ import annotations

import string
from typing import Any

from serve.tensor import function as fn
from serve.tensor.grad_mode import state
from serve.tensor.tensor import Tensor, _make


def _same_dtype(a: Tensor, b: Tensor) -> None:
    if a._dtype is not b._dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {a._dtype.name} != {b._dtype.name}")
    if a._device != b._device:
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, {a._device} and {b._device}!")  # fmt: skip


def _shape_error(a: Tensor, b: Tensor) -> RuntimeError:
    if a.ndim == 1 and b.ndim == 1:
        return RuntimeError(
            f"inconsistent tensor size, expected tensor [{a.shape[0]}] and src [{b.shape[0]}] to have the same "
            f"number of elements, but got {a.shape[0]} and {b.shape[0]} elements respectively"
        )
    rows = a.shape[-2] if a.ndim > 1 else 1
    cols = b.shape[-1] if b.ndim > 1 else 1
    return RuntimeError(
        f"mat1 and mat2 shapes cannot be multiplied ({rows}x{a.shape[-1]} and {b.shape[-2] if b.ndim > 1 else b.shape[0]}x{cols})"
    )


def matmul(input: Tensor, other: Tensor) -> Tensor:
    if not isinstance(other, Tensor):
        raise TypeError(f"matmul(): argument 'other' must be Tensor, not {type(other).__name__}")
    _same_dtype(input, other)
    if input.ndim == 0 or other.ndim == 0:
        raise RuntimeError(
            f"both arguments to matmul need to be at least 1D, but they are {input.ndim}D and {other.ndim}D"
        )
    k_b = other.shape[-2] if other.ndim > 1 else other.shape[0]
    if input.shape[-1] != k_b:
        raise _shape_error(input, other)
    if state.enabled and (input._requires_grad or other._requires_grad):
        return fn.Matmul.apply(input, other)
    try:
        out = input._ops.matmul(input._data, other._data)
    except ValueError:
        raise _batch_error(input, other) from None
    return _make(out, input._dtype, input._device, input._ops)


def _batch_error(a: Tensor, b: Tensor) -> RuntimeError:
    return RuntimeError(
        f"The batch dimensions of the operands do not broadcast: {list(a.shape[:-2])} and {list(b.shape[:-2])}"
    )


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
            f"size mismatch, got input ({input.shape[0]}), mat ({input.shape[0]}x{input.shape[1]}), vec ({vec.shape[0]})"
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
        raise RuntimeError(f"einsum(): more operands were provided than specified in the equation" if len(operands) > len(terms) else "einsum(): fewer operands were provided than specified in the equation")  # fmt: skip
    used = set(eq) - set(".,->")
    spare = [c for c in string.ascii_letters if c not in used]
    n_ell = 0
    for term, op in zip(terms, operands):
        if "..." in term:
            n_ell = max(n_ell, op.ndim - (len(term) - 3))
    ell = "".join(spare[:n_ell])
    new_terms = []
    for term, op in zip(terms, operands):
        if "..." in term:
            k = op.ndim - (len(term) - 3)
            term = term.replace("...", ell[n_ell - k :])
        if len(term) != op.ndim:
            raise RuntimeError(
                f"einsum(): the number of subscripts in the equation ({len(term)}) does not match the number of "
                f"dimensions ({op.ndim}) for operand {len(new_terms)}" + (" and no ellipsis was given" if "..." not in term else "")
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
                raise RuntimeError(f"einsum: repeated subscripts within one operand ('{term}') are not differentiable here; use diagonal()/trace first")  # fmt: skip
        return fn.Einsum.apply(*ops_t, equation=eq)
    try:
        out = ref._ops.einsum(eq, *[t._data for t in ops_t])
    except ValueError as e:
        raise RuntimeError(f"einsum(): {e}") from None
    return _make(out, ref._dtype, ref._device, ref._ops)
