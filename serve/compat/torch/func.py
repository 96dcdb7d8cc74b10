"""`torch.vmap` / `torch.func.vmap` on serve: a function of one example mapped over a dimension of its inputs.

    torch.vmap(f, in_dims=(None, 1), out_dims=1)(h, ngrams)     # f(h, ngrams[:, i]) for every i, stacked at dim 1

Who calls it: transformers 5.x's masking utilities (`masking_utils._vmap_expansion_sdpa`) nest four vmaps over
(batch, head, query, key) aranges, each mapping one 1-D index at dim 0, when a model adds its own mask function
(`or_mask_function` / `and_mask_function`: packed sequences, bidirectional image tokens); its watermarking logits
processor maps a hash over the n-gram and depth dimensions (`in_dims=(None, 1), out_dims=1`).

Decisions, and why:
- Two ways, one meaning. serve has no batching transform, so a vmap either loops or broadcasts:
  - Loop (always right): f is called once per index of the mapped dimension, with that slice of every mapped input
    (unmapped ones as they are), and the outputs are stacked at `out_dims`. A nested vmap loops inside each call.
  - Broadcast (the masks): when a chain of nested vmaps maps only 1-D tensors at dim 0, each position by one level,
    with `out_dims=0` (the mask expansion exactly), the innermost function is called once with level k's index
    reshaped to (n_k, 1, ..., 1) so that the levels broadcast to (n_0, ..., n_K): one call instead of
    n_0 * ... * n_K (131,072 for an 8 x 1 x 128 x 128 mask). That is only the same when f is elementwise in its
    mapped inputs (index arithmetic, comparisons, indexing a tensor by them), so the result is checked: it must
    broadcast to the levels' sizes, and f called on the first and on the last index of every level (0-d inputs, as
    torch's vmap gives it) must return a 0-d value equal to the broadcast result there. Anything else (an error, a
    shape, a value) falls back to the loop, which then gives f's own error if f has one. f is called up to three
    more times than torch would call it: a function with side effects should not be vmapped here.
- `in_dims`: an int for every argument, or one entry per positional argument (int or None; a tuple/list/dict
  argument maps every tensor in it). Keyword arguments are never mapped (torch's rule). `chunk_size` and
  `randomness` are accepted and change nothing (the loop is already one example at a time).
- Errors are torch's: a mapped non-tensor, mapped sizes that differ, nothing mapped, a size-0 mapped dimension.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from serve.tensor.shape_ops import stack
from serve.tensor.tensor import Tensor

__all__ = ["vmap"]

InDims = int | None | Sequence[Any]


def vmap(func: Callable[..., Any], in_dims: InDims = 0, out_dims: int | Sequence[int] = 0,
         randomness: str = "error", *, chunk_size: int | None = None) -> Callable[..., Any]:  # fmt: skip
    """`func` mapped over `in_dims` of its positional arguments, outputs stacked at `out_dims` (module docstring)."""
    if not callable(func):
        raise TypeError(f"vmap(func): func must be callable, got {type(func).__name__}")
    return Vmapped(func, in_dims, out_dims)


class Vmapped:
    """One vmap level; its `func` may be another level (a nested vmap)."""

    def __init__(self, func: Callable[..., Any], in_dims: InDims, out_dims: int | Sequence[int]) -> None:
        self.func, self.in_dims, self.out_dims = func, in_dims, out_dims

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fast = _broadcast(self, args, kwargs)
        return fast if fast is not None else self._loop(args, kwargs)

    def dims(self, args: tuple) -> list[Any]:
        """One in_dim per positional argument."""
        if self.in_dims is None or isinstance(self.in_dims, int):
            return [self.in_dims] * len(args)
        dims = list(self.in_dims)
        if len(dims) != len(args):
            raise ValueError(f"vmap: in_dims has {len(dims)} entries but the function was called with {len(args)} "
                             "positional arguments: give one in_dim (int or None) per argument")  # fmt: skip
        return dims

    def _loop(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        dims = self.dims(args)
        found = [_size(a, d) for a, d in zip(args, dims) if d is not None]
        sizes = {s for s in found if s is not None}
        if not sizes:
            raise ValueError("vmap: at least one input must be mapped (in_dims are all None): map a tensor argument")
        if len(sizes) > 1:
            raise ValueError(f"vmap: the mapped dimensions have different sizes {sorted(sizes)}: map dimensions of "
                             "one size")  # fmt: skip
        n = sizes.pop()
        if n == 0:
            raise ValueError("vmap: the mapped dimension has size 0; torch's vmap cannot map it either")
        outs = [self.func(*[a if d is None else _take(a, d, i) for a, d in zip(args, dims)], **kwargs)
                for i in range(n)]  # fmt: skip
        return _stacked(outs, self.out_dims)


def _size(arg: Any, dim: Any) -> int | None:
    """The size of `arg`'s mapped dimension (the first tensor's, in a container)."""
    if isinstance(arg, Tensor):
        if not isinstance(dim, int):
            raise ValueError(f"vmap: in_dim {dim!r} for a tensor argument: give an int or None")
        if not -arg.dim() <= dim < max(arg.dim(), 1) or arg.dim() == 0:
            raise ValueError(f"vmap: in_dim {dim} is out of range for a tensor of shape {list(arg.shape)}")
        return int(arg.shape[dim])
    if isinstance(arg, (list, tuple)):
        found = [_size(a, dim) for a in arg]
        return next((s for s in found if s is not None), None)
    if isinstance(arg, dict):
        return _size(list(arg.values()), dim)
    raise ValueError(f"vmap: in_dim={dim} for an input of type {type(arg).__name__}: only tensors can be mapped "
                     "(give None for it)")  # fmt: skip


def _take(arg: Any, dim: int, i: int) -> Any:
    """Index i of `arg`'s dimension `dim` (every tensor's, in a container)."""
    if isinstance(arg, Tensor):
        d = dim % arg.dim()
        return arg[(slice(None),) * d + (i,)]
    if isinstance(arg, (list, tuple)):
        return type(arg)(_take(a, dim, i) for a in arg)
    if isinstance(arg, dict):
        return {k: _take(v, dim, i) for k, v in arg.items()}
    return arg


def _stacked(outs: list[Any], out_dims: int | Sequence[int]) -> Any:
    first = outs[0]
    if isinstance(first, Tensor):
        if not isinstance(out_dims, int):
            raise ValueError(f"vmap: out_dims {out_dims!r} for one output: give an int")
        return stack(outs, dim=out_dims if out_dims >= 0 else out_dims + first.dim() + 1)
    if isinstance(first, (tuple, list)):
        dims = [out_dims] * len(first) if isinstance(out_dims, int) else list(out_dims)
        if len(dims) != len(first):
            raise ValueError(f"vmap: out_dims has {len(dims)} entries for {len(first)} outputs")
        return type(first)(_stacked([o[j] for o in outs], dims[j]) for j in range(len(first)))
    raise ValueError(f"vmap: the function returned {type(first).__name__}; vmap needs tensors (or tuples of them)")


# -- the broadcast way (module docstring) -------------------------------------------------------------------------
def _levels(outer: Vmapped) -> tuple[list[Vmapped], Callable[..., Any]]:
    levels, func = [outer], outer.func
    while isinstance(func, Vmapped):
        levels.append(func)
        func = func.func
    return levels, func


def _broadcast(outer: Vmapped, args: tuple, kwargs: dict[str, Any]) -> Tensor | None:
    """The chain's result by one broadcast call, checked; None where the loop must do it."""
    levels, func = _levels(outer)
    owner: dict[int, int] = {}  # argument position -> the level that maps it
    try:
        for k, level in enumerate(levels):
            if level.out_dims != 0:
                return None
            for p, d in enumerate(level.dims(args)):
                if d is None:
                    continue
                if d not in (0, -1) or p in owner or not isinstance(args[p], Tensor) or args[p].dim() != 1:
                    return None
                owner[p] = k
    except ValueError:
        return None
    sizes = [{int(args[p].shape[0]) for p, k in owner.items() if k == level} for level in range(len(levels))]
    if any(len(s) != 1 for s in sizes) or any(0 in s for s in sizes):
        return None
    shape = tuple(s.pop() for s in sizes)  # (n_0, ..., n_K)
    depth = len(levels)
    spread = list(args)
    for p, k in owner.items():
        spread[p] = args[p].reshape((shape[k],) + (1,) * (depth - 1 - k))  # level k's index on axis k
    try:
        out = func(*spread, **kwargs)
        if not isinstance(out, Tensor) or out.dim() > depth:
            return None
        out = out.expand(*shape).contiguous()  # (n_0, ..., n_K)
        for corner in ((0,) * depth, tuple(n - 1 for n in shape)):
            point = list(args)
            for p, k in owner.items():
                point[p] = args[p][corner[k]]  # 0-d, as torch's vmap hands it
            want = func(*point, **kwargs)
            if not (isinstance(want, Tensor) and want.dim() == 0 and _same(want, out[corner])):
                return None
    except Exception:  # not elementwise in its mapped inputs: the loop calls f as torch would
        return None
    return out


def _same(a: Tensor, b: Tensor) -> bool:
    x, y = np.asarray(a.numpy()), np.asarray(b.numpy())
    if x.dtype != y.dtype:
        return False
    if x.dtype.kind in "fc":
        return bool(np.allclose(x, y, rtol=1e-6, atol=0, equal_nan=True))
    return bool(np.array_equal(x, y))
