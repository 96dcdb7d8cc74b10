"""Argument makers for every public primitive of the backends: one entry per `ops_cpu` name.

`CASES[name]` is a list of makers; a maker takes a float dtype (float32, float16 or bfloat16) and returns the
positional arguments (numpy arrays, Python values, tuples of those) for one call. The GPU parity test
(`test_ops_cuda.py`) runs each call on `ops_cpu` and on `ops_cuda` with the arrays copied over and compares the
results; `MUTATES[name]` is the index of the argument an in-place primitive writes (compared instead of the
result); `FIXED_DTYPE` names the makers that ignore the float dtype (integer and bool primitives, creation).
`NOT_CALLED` lists the names that are not functions of arrays (they are checked by other tests).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

F32, F16, BF16 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
FLOATS = (F32, F16, BF16)

Maker = Callable[[np.dtype], tuple]


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def randn(*shape: int, dt: np.dtype = F32, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return (_rng(seed).standard_normal(shape) * scale).astype(dt)


def positive(*shape: int, dt: np.dtype = F32, seed: int = 0) -> np.ndarray:
    return (_rng(seed).random(shape) * 2 + 0.1).astype(dt)


def unit(*shape: int, dt: np.dtype = F32, seed: int = 0) -> np.ndarray:
    """Values in (-0.9, 0.9): the domain of erfinv."""
    return ((_rng(seed).random(shape) * 2 - 1) * 0.9).astype(dt)


def ints(*shape: int, low: int = -5, high: int = 6, dt: Any = np.int64, seed: int = 0) -> np.ndarray:
    return _rng(seed).integers(low, high, shape).astype(dt)


def bools(*shape: int, seed: int = 0) -> np.ndarray:
    return _rng(seed).random(shape) < 0.5


def _unary(make: Callable[..., np.ndarray] = randn, shape: tuple[int, ...] = (3, 5, 7)) -> list[Maker]:
    return [lambda dt: (make(*shape, dt=dt),), lambda dt: (make(4099, dt=dt, seed=1),)]


def _binary() -> list[Maker]:
    return [
        lambda dt: (randn(4, 5, dt=dt), randn(4, 5, dt=dt, seed=1)),
        lambda dt: (randn(2, 3, 4, dt=dt), randn(4, dt=dt, seed=1)),  # broadcasting
        lambda dt: (randn(3, 4, dt=dt), 1.5),  # a Python scalar keeps the array's dtype
    ]


def _binary_positive() -> list[Maker]:
    return [lambda dt: (positive(4, 5, dt=dt), positive(4, 5, dt=dt, seed=1))]


def _int_binary() -> list[Maker]:
    return [lambda dt: (ints(4, 5), ints(4, 5, seed=1)), lambda dt: (bools(3, 4), bools(3, 4, seed=1))]


def _reduction(*extra: Any) -> list[Maker]:
    return [
        lambda dt: (randn(3, 4, 5, dt=dt), (1,), False, *extra),
        lambda dt: (randn(3, 4, 5, dt=dt), (0, 2), True, *extra),
        lambda dt: (randn(6, 7, dt=dt), None, False, *extra),
    ]


# fmt: off
CASES: dict[str, list[Maker]] = {
    # ---- creation and conversion
    "asarray": [lambda dt: (randn(3, 4, dt=dt),)],
    "array": [lambda dt: (randn(3, 4, dt=dt),)],
    "zeros": [lambda dt: ((3, 4), dt)],
    "ones": [lambda dt: ((3, 4), dt)],
    "full": [lambda dt: ((3, 4), 2.5, dt), lambda dt: ((2,), -np.inf, dt)],
    "eye": [lambda dt: (4, 5, 0, dt), lambda dt: (3, None, 1, dt)],  # (N, M, k, dtype) as numpy
    "ascontiguousarray": [lambda dt: (randn(4, 3, dt=dt).T,)],
    "astype": [lambda dt: (randn(3, 4), dt), lambda dt: (randn(3, 4, dt=dt), np.dtype(np.float32)),
               lambda dt: (randn(3, 4, dt=dt, scale=5), np.dtype(np.int64))],
    "arange": [lambda dt: (0, 10, 1, np.dtype(np.int64)), lambda dt: (-1.0, 2.0, 0.25, dt),
               lambda dt: (0.5, 3.7, 0.3, dt)],
    "linspace": [lambda dt: (-1.0, 1.0, 7, dt), lambda dt: (0.0, 5.0, 1, dt)],
    # ---- random: each side gets its own generator made from the same seed
    "uniform": [lambda dt: ("gen", (3, 4), dt), lambda dt: ("gen", (5,), dt, -2.0, 3.0)],
    "normal": [lambda dt: ("gen", (3, 4), dt), lambda dt: ("gen", (5,), dt, 1.0, 2.0),
               lambda dt: ("gen", (2, 3), dt, randn(2, 3, dt=dt), positive(2, 3, dt=dt))],
    "integers": [lambda dt: ("gen", 0, 10, (3, 4), np.dtype(np.int64))],
    "permutation": [lambda dt: ("gen", 10, np.dtype(np.int64))],
    "bernoulli": [lambda dt: ("gen", (_rng(3).random((4, 5))).astype(dt), dt)],
    "dropout_mask": [lambda dt: ("gen", (4, 5), 0.7, dt), lambda dt: ("gen", (3,), 0.0, dt)],
    # ---- elementwise
    **{name: _unary() for name in ("neg", "abs", "exp", "sin", "cos", "tanh", "sign", "floor", "ceil", "trunc",
                                    "round", "isnan", "isinf", "isfinite", "sigmoid", "relu", "erf", "expm1",
                                    "silu", "hardswish", "hardsigmoid", "log_sigmoid", "mish")},
    **{name: _unary(positive) for name in ("log", "log1p", "sqrt", "reciprocal", "rsqrt")},
    "tan": [lambda dt: (unit(3, 5, dt=dt),)],
    "erfinv": [lambda dt: (unit(3, 5, dt=dt),), lambda dt: (np.array([-1.0, 1.0, 0.0], dt),)],
    "logical_not": [lambda dt: (bools(3, 4),), lambda dt: (randn(3, 4, dt=dt),)],
    "bitwise_not": [lambda dt: (ints(3, 4),), lambda dt: (bools(3, 4),)],
    **{name: _binary() for name in ("add", "sub", "mul", "div", "maximum", "minimum", "fmax", "eq", "ne", "lt",
                                    "le", "gt", "ge")},
    **{name: _binary_positive() for name in ("floor_divide", "remainder", "power")},
    **{name: _int_binary() for name in ("logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
                                        "bitwise_xor")},
    "where": [lambda dt: (bools(3, 4), randn(3, 4, dt=dt), randn(3, 4, dt=dt, seed=1)),
              lambda dt: (bools(3, 4), randn(3, 4, dt=dt), np.asarray(0.0, dt))],
    "clip": [lambda dt: (randn(3, 4, dt=dt), -0.5, 0.5)],
    "gelu": [lambda dt: (randn(3, 5, dt=dt), "none"), lambda dt: (randn(4099, dt=dt), "tanh")],
    "elu": [lambda dt: (randn(3, 5, dt=dt), 1.0, 1.0, 1.0), lambda dt: (randn(3, 5, dt=dt), 1.67, 1.05, 1.0),
            lambda dt: (randn(3, 5, dt=dt), 0.5, 1.0, 2.0)],
    "leaky_relu": [lambda dt: (randn(3, 5, dt=dt), 0.01), lambda dt: (randn(3, 5, dt=dt), 2.0)],
    "hardtanh": [lambda dt: (randn(3, 5, dt=dt), -1.0, 1.0)],
    "softplus": [lambda dt: (randn(3, 5, dt=dt, scale=10), 1.0, 20.0), lambda dt: (randn(3, 5, dt=dt), 2.0, 1.0)],
    "threshold": [lambda dt: (randn(3, 5, dt=dt), 0.1, 20.0)],
    # ---- reductions
    "sum": [lambda dt: (randn(3, 4, 5, dt=dt), (1,), False, dt), lambda dt: (randn(3, 4, 5, dt=dt), None, True, dt),
            lambda dt: (bools(3, 4), (0,), False, np.dtype(np.int64)),
            lambda dt: (randn(3, 4, dt=dt), (0,), False, np.dtype(np.float32))],
    "prod": [lambda dt: (positive(3, 4, dt=dt), (1,), False, dt), lambda dt: (ints(3, 4), None, False,
                                                                             np.dtype(np.int64))],
    "amax": _reduction(),
    "amin": _reduction(),
    "argmax": [lambda dt: (randn(3, 4, 5, dt=dt), 1, False), lambda dt: (randn(3, 4, dt=dt), None, False),
               lambda dt: (randn(3, 4, dt=dt), 0, True),
               lambda dt: (np.array([[1.0, np.nan, 3.0], [2.0, 5.0, 5.0]], dt), 1, False)],
    "argmin": [lambda dt: (randn(3, 4, 5, dt=dt), 2, False), lambda dt: (randn(3, 4, dt=dt), None, True)],
    "any": [lambda dt: (bools(3, 4), (1,), False), lambda dt: (bools(3, 4), None, True)],
    "all": [lambda dt: (bools(3, 4), (0,), True), lambda dt: (randn(3, 4, dt=dt) > -1, None, False)],
    "cumsum": [lambda dt: (randn(3, 4, dt=dt), 1, dt), lambda dt: (ints(3, 4), 0, np.dtype(np.int64))],
    "cumprod": [lambda dt: (positive(3, 4, dt=dt), 1, dt)],
    "softmax": [lambda dt: (randn(3, 5, 7, dt=dt, scale=3), -1), lambda dt: (randn(3, 5, 7, dt=dt), 1),
                lambda dt: (randn(4, 3000, dt=dt, scale=5), 1), lambda dt: (randn(0, 4, dt=dt), 1)],
    "log_softmax": [lambda dt: (randn(3, 5, 7, dt=dt, scale=3), -1), lambda dt: (randn(3, 5, 7, dt=dt), 0),
                    lambda dt: (randn(2, 2000, dt=dt), 1)],
    "masked_softmax": [
        lambda dt: (randn(2, 3, 4, 5, dt=dt), None, False, False),
        lambda dt: (randn(2, 3, 4, 5, dt=dt), bools(4, 5), True, True),
        lambda dt: (randn(2, 3, 4, 5, dt=dt), np.tril(np.ones((4, 5), bool)), True, False),
        lambda dt: (randn(2, 3, 4, 5, dt=dt), np.zeros((2, 1, 1, 5), bool), True, True),  # every row dead: zeros
        lambda dt: (randn(2, 3, 4, 5, dt=dt), randn(2, 1, 1, 5, dt=dt), False, True),
        lambda dt: (randn(4, 5, dt=dt), np.where(bools(4, 5), 0.0, -np.inf).astype(dt), False, True),
        lambda dt: (randn(2, 2, 3, 4, 5, dt=dt), bools(3, 4, 5), True, True),  # more than 4 dims
    ],
    # ---- matrix products
    "matmul": [lambda dt: (randn(5, 7, dt=dt), randn(7, 3, dt=dt, seed=1)),
               lambda dt: (randn(2, 5, 7, dt=dt), randn(7, 3, dt=dt, seed=1)),
               lambda dt: (randn(2, 3, 5, 7, dt=dt), randn(2, 3, 7, 4, dt=dt, seed=1))],
    "einsum": [lambda dt: ("ij,jk->ik", randn(5, 7, dt=dt), randn(7, 3, dt=dt, seed=1)),
               lambda dt: ("bij->bji", randn(2, 3, 4, dt=dt))],
    "linear": [lambda dt: (randn(4, 8, dt=dt), randn(6, 8, dt=dt, seed=1), randn(6, dt=dt, seed=2)),
               lambda dt: (randn(2, 3, 8, dt=dt), randn(6, 8, dt=dt, seed=1), None)],
    # ---- movement and indexing
    "reshape": [lambda dt: (randn(3, 4, dt=dt), (2, 6))],
    "moveaxis": [lambda dt: (randn(2, 3, 4, dt=dt), 0, -1)],
    "transpose": [lambda dt: (randn(2, 3, 4, dt=dt), (2, 0, 1))],
    "broadcast_to": [lambda dt: (randn(3, 1, dt=dt), (2, 3, 4))],
    "concatenate": [lambda dt: ([randn(2, 3, dt=dt), randn(4, 3, dt=dt, seed=1)], 0)],
    "stack": [lambda dt: ([randn(2, 3, dt=dt), randn(2, 3, dt=dt, seed=1)], 1)],
    "flip": [lambda dt: (randn(2, 3, 4, dt=dt), (0, 2))],
    "roll": [lambda dt: (randn(3, 4, dt=dt), (1, -2), (0, 1))],
    "tril": [lambda dt: (randn(4, 5, dt=dt), 0), lambda dt: (randn(2, 4, 5, dt=dt), -1)],
    "triu": [lambda dt: (randn(4, 5, dt=dt), 1)],
    "take": [lambda dt: (randn(6, 4, dt=dt), ints(2, 3, low=0, high=6), 0),  # an embedding lookup
             lambda dt: (randn(6, 4, dt=dt), ints(5, low=0, high=4, dt=np.int32), 1)],
    "take_along_axis": [lambda dt: (randn(3, 5, dt=dt), ints(3, 2, low=0, high=5), 1)],
    "nonzero": [lambda dt: (bools(3, 4),)],
    "pad": [lambda dt: (randn(2, 3, dt=dt), ((1, 0), (2, 1)))],
    "index_add": [lambda dt: (np.zeros((5, 3), dt), (ints(6, low=0, high=5),), randn(6, 3, dt=dt))],
    "scatter_add": [lambda dt: (np.zeros((3, 5), dt), 1, ints(3, 4, low=0, high=5), randn(3, 4, dt=dt))],
    "sort": [lambda dt: (randn(3, 7, dt=dt), 1, False), lambda dt: (randn(3, 7, dt=dt), 0, True),
             lambda dt: (np.array([1.0, 3.0, np.nan, 3.0, 2.0], dt), 0, True),  # NaN first (largest), stable
             lambda dt: (np.array([2, 1, 2, 0, 1]), 0, False)],
    "topk": [lambda dt: (randn(3, 50, dt=dt), 3, 1, True), lambda dt: (randn(3, 10, dt=dt), 4, 1, False)],
    "copyto": [lambda dt: (np.zeros((3, 4), dt), randn(3, 4, dt=dt))],
    "relu_": [lambda dt: (randn(3, 4, dt=dt),)],
    "binary_": [lambda dt: ("add", randn(3, 4, dt=dt), randn(3, 4, dt=dt, seed=1)),
                lambda dt: ("mul", randn(3, 4, dt=dt), 2.5)],
    # ---- normalization
    "layer_norm": [lambda dt: (randn(4, 6, dt=dt, scale=3), randn(6, dt=dt), randn(6, dt=dt, seed=1), 1, 1e-5),
                   lambda dt: (randn(2, 3, 4, 5, dt=dt) + 10, None, None, 2, 1e-5),
                   lambda dt: (randn(3, 2000, dt=dt), positive(2000, dt=dt), None, 1, 1e-6)],
    "batch_norm_eval": [lambda dt: (randn(2, 3, 4, 5, dt=dt), randn(3, dt=dt), positive(3, dt=dt),
                                    randn(3, dt=dt, seed=1), randn(3, dt=dt, seed=2), 1e-5),
                        lambda dt: (randn(4, 3, dt=dt), randn(3, dt=dt), positive(3, dt=dt), None, None, 1e-5)],
    "moments": [lambda dt: (randn(2, 3, 4, 5, dt=dt), (2, 3)), lambda dt: (randn(2, 3, 4, 5, dt=dt), (0, 2, 3))],
    "standardize": [lambda dt: (randn(2, 3, 4, 5, dt=dt) * 3 + 1, (2, 3), 1e-5),
                    lambda dt: (randn(2, 3, 4, 5, dt=dt), (0, 2, 3), 1e-5)],
    "bag_ids": [lambda dt: (np.array([0, 2, 2, 5]), 7)],
    "bag_counts": [lambda dt: (np.array([0, 0, 1, 3, 3, 3]), 5)],
    "bag_positions": [lambda dt: (np.array([0, 0, 1, 3, 3, 3]), 5)],
    "orthogonal": [lambda dt: (randn(4, 6),), lambda dt: (randn(6, 3),)],
    # ---- convolution, pooling, resampling
    "conv2d": [
        lambda dt: (randn(2, 3, 9, 8, dt=dt), randn(4, 3, 3, 3, dt=dt, seed=1), randn(4, dt=dt, seed=2), (1, 1),
                    (1, 1, 1, 1), (1, 1), 1),
        lambda dt: (randn(2, 4, 9, 8, dt=dt), randn(6, 2, 3, 2, dt=dt, seed=1), None, (2, 1), (0, 1, 2, 0),
                    (1, 2), 2),
        lambda dt: (randn(2, 4, 7, 7, dt=dt), randn(8, 1, 3, 3, dt=dt, seed=1), randn(8, dt=dt), (1, 1),
                    (1, 1, 1, 1), (1, 1), 4),  # depthwise, multiplier 2
        lambda dt: (randn(2, 6, 5, 5, dt=dt), randn(4, 6, 1, 1, dt=dt, seed=1), randn(4, dt=dt), (1, 1),
                    (0, 0, 0, 0), (1, 1), 1),  # pointwise
    ],
    "conv2d_input_grad": [lambda dt: (randn(2, 4, 5, 4, dt=dt), randn(4, 3, 3, 3, dt=dt, seed=1), (9, 8), (2, 2),
                                      (1, 1, 1, 1), (1, 1), 1)],
    "conv2d_weight_grad": [lambda dt: (randn(2, 3, 9, 8, dt=dt), randn(2, 4, 5, 4, dt=dt, seed=1), (3, 3), (2, 2),
                                       (1, 1, 1, 1), (1, 1), 1)],
    "unfold": [lambda dt: (randn(2, 3, 6, 5, dt=dt), (2, 3), (1, 2), (1, 0, 0, 1), (1, 1))],
    "fold": [lambda dt: (randn(2, 3 * 6, 12, dt=dt), (6, 5), (2, 3), (1, 2), (1, 0, 0, 1), (1, 1))],
    "max_pool2d": [lambda dt: (randn(2, 3, 9, 8, dt=dt), (3, 3), (2, 2), (1, 1), (1, 1), (5, 4), True),
                   lambda dt: (randn(2, 3, 9, 8, dt=dt), (2, 2), (2, 2), (0, 0), (1, 1), (5, 4), False),  # ceil
                   lambda dt: (ints(1, 2, 6, 6), (2, 2), (2, 2), (0, 0), (1, 1), (3, 3), True)],
    "avg_pool2d": [lambda dt: (randn(2, 3, 9, 8, dt=dt), (3, 3), (2, 2), (1, 1), (5, 4), True, None),
                   lambda dt: (randn(2, 3, 9, 8, dt=dt), (3, 3), (2, 2), (1, 1), (5, 4), False, None),
                   lambda dt: (randn(2, 3, 9, 8, dt=dt), (2, 2), (2, 2), (0, 0), (5, 4), True, 3)],
    "avg_pool2d_backward": [lambda dt: (randn(2, 3, 5, 4, dt=dt), (9, 8), (3, 3), (2, 2), (1, 1), False, None)],
    "adaptive_max_pool2d": [lambda dt: (randn(2, 3, 7, 5, dt=dt), (3, 2))],
    "adaptive_avg_matrix": [lambda dt: (7, 3, dt)],
    "gather_planes": [lambda dt: (randn(2, 3, 4, 5, dt=dt), ints(2, 3, 2, 2, low=0, high=20))],
    "scatter_planes": [lambda dt: (randn(2, 3, 2, 2, dt=dt), ints(2, 3, 2, 2, low=0, high=20), (4, 5))],
    "pad_plan": [lambda dt: ("reflect", 5, 2, 1), lambda dt: ("replicate", 4, 1, 3),
                 lambda dt: ("circular", 4, 2, -1)],
    "nearest_plan": [lambda dt: (4, 7, None, False), lambda dt: (5, 3, None, True)],
    "linear_plan": [lambda dt: (4, 7, False, None, dt), lambda dt: (4, 7, True, None, dt)],
    "resample": [lambda dt: (randn(2, 3, 4, 5, dt=dt), ("plan", ("linear", 4, 7, False), ("nearest", 5, 3)))],
    "resample_adjoint": [lambda dt: (randn(2, 3, 7, 3, dt=dt), (4, 5),
                                     ("plan", ("linear", 4, 7, False), ("nearest", 5, 3)))],
}
# fmt: on

# in-place primitives: the index of the argument they write
MUTATES = {"copyto": 0, "relu_": 0, "binary_": 1, "index_add": 0, "scatter_add": 0}
# makers whose arrays do not depend on the float dtype (run once, with float32)
FIXED_DTYPE = {"bitwise_not", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
               "bitwise_xor", "any", "bag_ids", "bag_counts", "bag_positions", "integers", "permutation",
               "nonzero", "orthogonal", "pad_plan", "nearest_plan"}  # fmt: skip
# names that are not array functions, checked on their own
NOT_CALLED = {"ndarray", "generator", "to_numpy", "from_numpy", "on_device", "view", "strides", "is_contiguous",
              "shares_memory", "array2string", "empty",
              # an optional fused primitive: None where a backend has no kernel for it (tests/unit/backend/
              # test_cpu_attention.py checks the CPU one; scaled_dot_product_attention's tests cover both paths)
              "attention"}  # fmt: skip
# results that hold random values drawn on the host: equal on both backends for the same seed
RANDOM = {"uniform", "normal", "integers", "permutation", "bernoulli", "dropout_mask"}


def plan_for(ops: Any, spec: tuple, dt: np.dtype) -> tuple:
    """A resampling plan built by `ops` from ("plan", (kind, size, out, ...), ...)."""
    steps = []
    for kind, *args in spec[1:]:
        if kind == "linear":
            steps.append(ops.linear_plan(*args, None, dt))
        else:
            steps.append(ops.nearest_plan(*args, None, False))
    return tuple(steps)
