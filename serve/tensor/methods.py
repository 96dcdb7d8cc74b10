"""Binds the operations of this package to `Tensor` as methods and Python operators, PyTorch-named.

Every function takes the tensor as its first argument, so `x.sum(1)` and `serve.sum(x, 1)` are one code
path. `op_` in-place forms come from `inplace.inplace_version(op)`.
"""

from __future__ import annotations

from typing import Any

from serve.tensor import (
    composite_ops,
    creation,
    dtypes,
    indexing,
    inplace,
    linalg,
    math_ops,
    membership,
    random,
    reduce_ops,
    repeat_gather,
    sampling,
    scaled_products,
    shape_ops,
    sorting,
)
from serve.tensor.tensor import Tensor

_METHODS: dict[Any, tuple[str, ...]] = {
    math_ops: (
        "add", "sub", "mul", "div", "true_divide", "divide", "multiply", "subtract", "floor_divide", "remainder",
        "pow", "neg", "negative", "abs", "absolute", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid",
        "erf", "relu", "reciprocal", "square", "floor", "ceil", "trunc", "round", "sign", "clamp", "clip", "maximum",
        "minimum", "eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal", "not_equal",
        "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor",
        "bitwise_not", "isnan", "isinf", "isfinite", "allclose", "isclose", "equal", "lerp",
    ),
    reduce_ops: (
        "sum", "nansum", "mean", "var", "std", "prod", "max", "min", "amax", "amin", "argmax", "argmin", "cumsum",
        "all", "any", "norm", "softmax", "log_softmax", "count_nonzero",
    ),
    shape_ops: (
        "reshape", "view", "view_as", "reshape_as", "flatten", "unflatten", "permute", "transpose", "swapaxes",
        "swapdims", "t", "movedim", "squeeze", "unsqueeze", "expand", "expand_as", "broadcast_to", "repeat",
        "chunk", "split", "tensor_split", "unbind", "narrow", "flip", "fliplr", "flipud", "roll", "tril", "triu",
        "contiguous", "clone", "sum_to_size",
    ),
    indexing: ("index_select", "masked_select", "masked_fill", "gather", "nonzero", "take", "argwhere"),
    linalg: ("matmul", "mm", "mv", "bmm", "dot", "inner", "outer", "ger"),
    scaled_products: ("addmm", "baddbmm"),
    repeat_gather: ("repeat_interleave", "take_along_dim"),
    sorting: ("sort", "argsort", "topk", "kthvalue", "msort"),
    creation: ("new_tensor", "new_zeros", "new_ones", "new_empty", "new_full"),
    random: ("uniform_", "normal_", "random_", "bernoulli_", "exponential_", "bernoulli"),
    composite_ops: ("diff", "tile", "log2", "log10"),
    sampling: ("multinomial",),
    inplace: ("copy_", "fill_", "zero_"),
}  # fmt: skip

_INPLACE = (
    "add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "pow", "neg", "abs", "exp", "log", "sqrt",
    "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf", "relu", "reciprocal", "floor", "ceil", "trunc", "round", "sign",
    "clamp", "clip", "masked_fill", "lerp", "tril", "triu", "square",
)  # fmt: skip


def _reflected(op: Any) -> Any:
    def method(self: Tensor, other: Any) -> Tensor:
        return op(other, self)

    return method


def _where(self: Tensor, condition: Tensor, other: Any) -> Tensor:
    return math_ops.where(condition, self, other)


def _invert(self: Tensor) -> Tensor:
    if self._dtype is dtypes.bool:
        return math_ops.logical_not(self)
    return math_ops.bitwise_not(self)


def _transposed(self: Tensor) -> Tensor:
    return shape_ops.permute(self, tuple(range(self.ndim))[::-1])


def _matrix_transposed(self: Tensor) -> Tensor:
    if self.ndim < 2:
        raise RuntimeError(f"tensor.mT is only supported on matrices or batches of matrices. Got {self.ndim}-D tensor.")
    return shape_ops.transpose(self, -2, -1)


def _bind() -> None:
    for module, names in _METHODS.items():
        for name in names:
            setattr(Tensor, name, getattr(module, name))
    for name in _INPLACE:
        src = getattr(math_ops, name, None) or getattr(shape_ops, name, None) or getattr(indexing, name)
        setattr(Tensor, name + "_", inplace.inplace_version(src))
    ops = {
        "add": math_ops.add, "sub": math_ops.sub, "mul": math_ops.mul, "truediv": math_ops.div,
        "floordiv": math_ops.floor_divide, "mod": math_ops.remainder, "pow": math_ops.pow,
        "matmul": linalg.matmul, "and": math_ops.bitwise_and, "or": math_ops.bitwise_or,
        "xor": math_ops.bitwise_xor,
    }  # fmt: skip
    for name, op in ops.items():
        setattr(Tensor, f"__{name}__", op)
        setattr(Tensor, f"__r{name}__", _reflected(op))
        setattr(Tensor, f"__i{name}__", inplace.inplace_version(op))
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        setattr(Tensor, f"__{name}__", getattr(math_ops, name))
    Tensor.__neg__ = math_ops.neg  # type: ignore[method-assign]
    Tensor.__pos__ = lambda self: self  # type: ignore[method-assign]
    Tensor.__abs__ = math_ops.abs  # type: ignore[method-assign]
    Tensor.__invert__ = _invert  # type: ignore[method-assign]
    Tensor.__getitem__ = indexing.getitem  # type: ignore[method-assign]
    setattr(Tensor, "__contains__", membership.contains)  # noqa: B010  (mypy: Tensor declares no __contains__)
    Tensor.__setitem__ = indexing.setitem  # type: ignore[method-assign]
    Tensor.__array_priority__ = 1000  # type: ignore[attr-defined]  # numpy defers `ndarray op tensor` to us
    Tensor.where = _where  # type: ignore[attr-defined]
    Tensor.T = property(_transposed)  # type: ignore[attr-defined]
    Tensor.mT = property(_matrix_transposed)  # type: ignore[attr-defined]
    Tensor.unsqueeze_ = lambda self, dim: _reshape_in_place(self, shape_ops.unsqueeze(self, dim))  # type: ignore[attr-defined]
    Tensor.squeeze_ = lambda self, dim=None: _reshape_in_place(self, shape_ops.squeeze(self, dim))  # type: ignore[attr-defined]
    Tensor.t_ = lambda self: _reshape_in_place(self, shape_ops.t(self))  # type: ignore[attr-defined]
    Tensor.transpose_ = lambda self, a, b: _reshape_in_place(self, shape_ops.transpose(self, a, b))  # type: ignore[attr-defined]


def _reshape_in_place(self: Tensor, view: Tensor) -> Tensor:
    """squeeze_/unsqueeze_/t_: the tensor itself takes the new shape (a view of the same storage)."""
    self._data = view._data
    if view._grad_fn is not None:
        self._grad_fn, self._output_nr = view._grad_fn, view._output_nr
    return self


_bind()
