"""Random numbers: manual_seed, Generator, rand/randn/randint/randperm/normal/bernoulli, and in-place fills.

The default generator is seeded like PyTorch's (`manual_seed`), but the streams differ from PyTorch's:
the same seed gives reproducible numbers within serve, not the numbers torch would draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from serve.backend import as_device, get_ops, placed
from serve.tensor import dtypes, versions
from serve.tensor.creation import _sizes
from serve.tensor.dtypes import dtype as Dtype
from serve.tensor.inplace import check_inplace
from serve.tensor.tensor import Tensor, _make

_DEFAULT_SEED = 67280421310721


class Generator:
    """A random stream (`torch.Generator`): `Generator().manual_seed(0)`."""

    def __init__(self, device: Any = "cpu") -> None:
        self.device = as_device(device)
        self.manual_seed(_DEFAULT_SEED)

    def manual_seed(self, seed: int) -> Generator:
        self._seed = int(seed)
        self._state = get_ops(self.device).generator(self._seed)
        return self

    def seed(self) -> int:
        import secrets

        self.manual_seed(secrets.randbits(63))
        return self._seed

    def initial_seed(self) -> int:
        return self._seed


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed the default generator, so later random tensors are reproducible."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def _float_dtype(dtype: Dtype | None) -> Dtype:
    dt = dtype or dtypes.get_default_dtype()
    if not dt.is_floating_point:
        raise RuntimeError(f"this random function needs a floating dtype, got {dt!r}")
    return dt


def _random(kind: str, size: Sequence[Any], dtype: Dtype | None, device: Any, requires_grad: bool,
            generator: Generator | None, **kw: Any) -> Tensor:  # fmt: skip
    dt = _float_dtype(dtype)
    dev, ops = placed(device)
    gen = (generator or default_generator)._state
    with ops.on_device(dev.index):
        data = getattr(ops, kind)(gen, _sizes(size), dt.np, **kw)
    t = _make(data, dt, dev, ops)
    return t.requires_grad_(True) if requires_grad else t


def rand(*size: Any, generator: Generator | None = None, dtype: Dtype | None = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:  # fmt: skip
    """Uniform samples in [0, 1)."""
    return _random("uniform", size, dtype, device, requires_grad, generator)


def randn(*size: Any, generator: Generator | None = None, dtype: Dtype | None = None, device: Any = None,
          requires_grad: bool = False) -> Tensor:  # fmt: skip
    """Standard normal samples."""
    return _random("normal", size, dtype, device, requires_grad, generator)


def randint(*args: Any, size: Any = None, generator: Generator | None = None, dtype: Dtype | None = None,
            device: Any = None, requires_grad: bool = False) -> Tensor:  # fmt: skip
    """Integers in [low, high): `randint(high, size)` or `randint(low, high, size)`."""
    if size is None:
        *bounds, size = args
    else:
        bounds = list(args)
    low, high = (0, bounds[0]) if len(bounds) == 1 else tuple(bounds)
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    dt = dtype or dtypes.int64
    dev, ops = placed(device)
    gen = (generator or default_generator)._state
    with ops.on_device(dev.index):
        data = ops.integers(gen, int(low), int(high), _sizes((size,)), dt.np)
    return _make(data, dt, dev, ops)


def randperm(n: int, *, generator: Generator | None = None, dtype: Dtype | None = None, device: Any = None) -> Tensor:
    dt = dtype or dtypes.int64
    dev, ops = placed(device)
    with ops.on_device(dev.index):
        data = ops.permutation((generator or default_generator)._state, int(n), dt.np)
    return _make(data, dt, dev, ops)


def normal(mean: Any = 0.0, std: Any = 1.0, size: Any = None, *, generator: Generator | None = None,
           dtype: Dtype | None = None, device: Any = None, requires_grad: bool = False) -> Tensor:  # fmt: skip
    """Normal samples: `normal(mean, std, size)` with numbers, or elementwise with tensor mean/std."""
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        ref = mean if isinstance(mean, Tensor) else std
        shape = ref.shape if size is None else tuple(size)
        if isinstance(mean, Tensor) and isinstance(std, Tensor):
            from serve.tensor.math_ops import broadcast_shapes

            shape = broadcast_shapes(mean.shape, std.shape)
        noise = randn(shape, generator=generator, dtype=ref._dtype, device=ref._device)
        return noise * std + mean
    if size is None:
        raise TypeError("normal() with float mean and std needs a size")
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return _random("normal", (tuple(size),), dtype, device, requires_grad, generator, mean=float(mean), std=float(std))


def rand_like(input: Tensor, *, dtype: Dtype | None = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return rand(input.shape, dtype=dtype or input._dtype, device=device or input._device, requires_grad=requires_grad)


def randn_like(input: Tensor, *, dtype: Dtype | None = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return randn(input.shape, dtype=dtype or input._dtype, device=device or input._device, requires_grad=requires_grad)


def randint_like(input: Tensor, low: int = 0, high: int | None = None, *, dtype: Dtype | None = None) -> Tensor:
    if high is None:
        low, high = 0, low
    return randint(low, high, input.shape, dtype=dtype or input._dtype, device=input._device)


def bernoulli(input: Tensor, p: Any = None, *, generator: Generator | None = None) -> Tensor:
    """1 with probability `input` (or `p`), else 0; same shape and dtype as input."""
    probs = input if p is None else input.new_full(input.shape, p)
    gen = (generator or default_generator)._state
    return _make(input._ops.bernoulli(gen, probs._data, input._dtype.np), input._dtype, input._device, input._ops)


# ---- in-place fills (used by nn.init; allowed on leaves under no_grad) -------------------------------
def _fill_from(self: Tensor, values: Any) -> Tensor:
    check_inplace(self)
    self._ops.copyto(self._data, values.astype(self._dtype.np, copy=False))
    versions.bump(self._data)
    return self


def uniform_(self: Tensor, a: float = 0.0, b: float = 1.0, *, generator: Generator | None = None) -> Tensor:
    gen = (generator or default_generator)._state
    return _fill_from(self, self._ops.uniform(gen, self.shape, self._dtype.np, float(a), float(b)))


def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0, *, generator: Generator | None = None) -> Tensor:
    gen = (generator or default_generator)._state
    return _fill_from(self, self._ops.normal(gen, self.shape, self._dtype.np, float(mean), float(std)))


def random_(self: Tensor, low: int = 0, high: int | None = None, *, generator: Generator | None = None) -> Tensor:
    if high is None:
        low, high = 0, low if low else 2**24
    gen = (generator or default_generator)._state
    return _fill_from(self, self._ops.integers(gen, low, high, self.shape, "int64"))


def bernoulli_(self: Tensor, p: float = 0.5, *, generator: Generator | None = None) -> Tensor:
    return _fill_from(self, bernoulli(self, p, generator=generator)._data)


def exponential_(self: Tensor, lambd: float = 1.0, *, generator: Generator | None = None) -> Tensor:
    u = rand(self.shape, generator=generator, dtype=dtypes.float64, device=self._device)
    return _fill_from(self, (-(1 - u).log() / lambd)._data)
