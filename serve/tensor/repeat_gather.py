"""`repeat_interleave` and `take_along_dim`, PyTorch's names, composed from views, index_select and gather (any
device, autograd from theirs). transformers' generation uses both: inputs repeated per beam or returned sequence,
and beams reordered by index.

    repeat_interleave(x, 3, dim=0)           each slice along dim repeated 3 times in place: [a, a, a, b, b, b]
    repeat_interleave(x, counts, dim=0)      slice i repeated counts[i] times (counts read on the host)
    repeat_interleave(counts)                arange(len(counts)) repeated counts[i] times
    take_along_dim(x, idx, dim)              gather along dim after broadcasting x and idx everywhere else;
                                             dim=None: along the flattened tensors
"""

from __future__ import annotations

from typing import Any

from serve.tensor import dtypes
from serve.tensor.creation import arange, as_tensor
from serve.tensor.indexing import gather, index_select
from serve.tensor.shape_ops import expand, reshape, unsqueeze
from serve.tensor.tensor import Tensor, wrap_dim


def repeat_interleave(input: Tensor, repeats: Any = None, dim: int | None = None, *,
                      output_size: int | None = None) -> Tensor:  # fmt: skip
    if repeats is None:  # repeat_interleave(counts): the indices repeated by their counts
        repeats, input = input, arange(input.shape[0], device=input.device)
    x = reshape(input, (-1,)) if dim is None else input
    d = 0 if dim is None else wrap_dim(dim, x.ndim)
    if isinstance(repeats, Tensor) and repeats.numel() != 1:
        counts = [int(c) for c in repeats.tolist()]
        if len(counts) != x.shape[d]:
            raise RuntimeError(f"repeats must have the same size as input along dim, but got repeats.size(0) = "
                               f"{len(counts)} and input.size({d}) = {x.shape[d]}")  # fmt: skip
        index = [i for i, c in enumerate(counts) for _ in range(c)]
        return index_select(x, d, as_tensor(index, dtype=dtypes.int64, device=x.device))
    n = int(repeats.item()) if isinstance(repeats, Tensor) else int(repeats)
    shape = list(x.shape)
    wide = shape[: d + 1] + [n] + shape[d + 1 :]  # (..., size, n, ...): each slice n times side by side
    shape[d] *= n
    return reshape(expand(unsqueeze(x, d + 1), wide), shape)


def take_along_dim(input: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:
    if dim is None:
        return gather(reshape(input, (-1,)), 0, reshape(indices, (-1,)))
    if input.ndim != indices.ndim:
        raise RuntimeError(
            "torch.take_along_dim(): input and indices should have the same number of dimensions, but got "
            f"{input.ndim} dimensions for input, and {indices.ndim} dimensions for indices"
        )
    d = wrap_dim(dim, input.ndim)
    common = [max(a, b) for a, b in zip(input.shape, indices.shape, strict=True)]  # broadcast all but dim
    x_shape = [s if k != d else input.shape[d] for k, s in enumerate(common)]
    i_shape = [s if k != d else indices.shape[d] for k, s in enumerate(common)]
    return gather(expand(input, x_shape), d, expand(indices, i_shape))
