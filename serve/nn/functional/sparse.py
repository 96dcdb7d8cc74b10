"""Lookups: `F.embedding`, `F.embedding_bag` (sum/mean/max over bags) and `F.one_hot`.

Gradients are dense (PyTorch's `sparse=True` is accepted and gives the same values as a dense tensor). The
embedding gradient is a scatter-add into the weight's rows, skipping `padding_idx`; `max_norm` renormalizes
the looked-up rows of the weight in place first, as PyTorch does.
"""

from __future__ import annotations

from typing import Any

from serve.tensor import dtypes
from serve.tensor.creation import arange
from serve.tensor.function import IndexBackward, Primitive
from serve.tensor.grad_mode import no_grad
from serve.tensor.math_ops import where
from serve.tensor.shape_ops import cat
from serve.tensor.tensor import Tensor, _make


class Embedding(Primitive):
    """weight[indices]; the gradient adds each output row into its weight row (none for padding_idx)."""

    _node_name = "EmbeddingBackward0"

    @staticmethod
    def forward(ctx, ops, weight, indices, padding_idx, scale_grad_by_freq):
        return ops.take(weight, indices, axis=0)

    @staticmethod
    def backward(ctx, g):
        indices = ctx.input(1).reshape(-1)
        rows, dim = ctx.input_shapes[0]
        g = g.reshape(-1, dim)  # (lookups, dim)
        if ctx.padding_idx is not None:
            g = g.masked_fill((indices == ctx.padding_idx).unsqueeze(1), 0)
        if ctx.scale_grad_by_freq:
            counts = IndexBackward.apply(g.new_ones(indices.shape), shape=(rows,), index=(indices._data,))
            g = g / counts[indices].unsqueeze(1)
        return IndexBackward.apply(g, shape=(rows, dim), index=(indices._data,)), None


def _check_indices(input: Tensor, rows: int, name: str) -> None:
    if input._dtype is not dtypes.int64 and input._dtype is not dtypes.int32:
        raise RuntimeError(
            f"Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got "
            f"{input._dtype} instead (while checking arguments for {name})"
        )
    if input._data.size and (input._data.min() < 0 or input._data.max() >= rows):
        raise IndexError("index out of range in self")


def _padding_index(padding_idx: int | None, rows: int) -> int | None:
    """padding_idx checked and made non-negative (PyTorch allows -rows <= padding_idx < rows)."""
    if padding_idx is None:
        return None
    if not -rows <= padding_idx < rows:
        raise ValueError("Padding_idx must be within num_embeddings")
    return padding_idx % rows


def _renorm_(weight: Tensor, input: Tensor, max_norm: float, norm_type: float) -> None:
    """Scale the rows of `weight` looked up by `input` whose norm exceeds max_norm down to max_norm, in place."""
    with no_grad():
        idx = input.reshape(-1)
        rows = weight[idx]
        norms = rows.norm(norm_type, dim=1, keepdim=True)
        scale = where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
        weight[idx] = rows * scale


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm: float | None = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:  # fmt: skip
    """The rows of `weight` (num_embeddings, embedding_dim) picked by the integer tensor `input`."""
    rows = weight.shape[0]
    _check_indices(input, rows, "embedding")
    padding_idx = _padding_index(padding_idx, rows)
    if max_norm is not None:
        _renorm_(weight, input, max_norm, norm_type)
    return Embedding.apply(weight, input, padding_idx=padding_idx, scale_grad_by_freq=scale_grad_by_freq)


# ---- embedding bags -----------------------------------------------------------------------------------
def _bags(input: Tensor, offsets: Tensor | None, per_sample_weights: Tensor | None,
          include_last_offset: bool) -> tuple[Tensor, Any, int, Tensor | None]:  # fmt: skip
    """(flat indices, the bag id of each index as a backend array, the number of bags, flat weights)."""
    if per_sample_weights is not None and per_sample_weights.shape != input.shape:
        raise ValueError(
            f"embedding_bag: If per_sample_weights ({per_sample_weights.shape}) is not None, then it must have the "
            f"same shape as the input ({input.shape})"
        )
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError(
                "if input is 2D, then offsets has to be None, as input is treated is a mini-batch of fixed length "
                f"sequences. However, found offsets of type {type(offsets).__name__}"
            )
        flat = input.reshape(-1)
        psw = None if per_sample_weights is None else per_sample_weights.reshape(-1)
        ids = arange(flat.numel()) // max(input.shape[1], 1)  # row i is bag i
        return flat, ids._data, input.shape[0], psw
    if input.ndim != 1:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    if offsets is None or offsets.ndim != 1:
        raise ValueError(f"offsets has to be a 1D Tensor but got {None if offsets is None else offsets.ndim}")
    starts = offsets._data.astype("int64")
    if starts.size and starts[0] != 0:
        raise RuntimeError(
            "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from position 0. "
            f"However, got {int(starts[0])}"
        )
    num_bags = starts.size - 1 if include_last_offset else starts.size
    return input, input._ops.bag_ids(starts[:num_bags], input.numel()), num_bags, per_sample_weights


def embedding_bag(input: Tensor, weight: Tensor, offsets: Tensor | None = None, max_norm: float | None = None,
                  norm_type: float = 2, scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights: Tensor | None = None, include_last_offset: bool = False,
                  padding_idx: int | None = None) -> Tensor:  # fmt: skip
    """Sum, mean or max of the embeddings in each bag: rows of a 2-D input, or input[offsets[i]:offsets[i+1]]."""
    if weight.ndim != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension {weight.ndim}")
    if mode not in ("sum", "mean", "max"):
        raise ValueError("mode has to be one of sum, mean or max")
    if mode == "max" and scale_grad_by_freq:
        raise ValueError("max mode does not support scaling the gradient by the frequency")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(
            "embedding_bag: per_sample_weights was not None. per_sample_weights is only supported for mode='sum' "
            f"(got mode='{mode}'). Please open a feature request on GitHub."
        )
    flat, ids, num_bags, psw = _bags(input, offsets, per_sample_weights, include_last_offset)
    rows, dim = weight.shape
    _check_indices(flat, rows, "embedding_bag")
    padding_idx = _padding_index(padding_idx, rows)
    if max_norm is not None:
        _renorm_(weight, flat, max_norm, norm_type)
    if padding_idx is not None:  # padding entries take no part in any bag, nor in a mean's count
        keep = flat != padding_idx
        flat, ids = flat[keep], ids[keep._data]
        psw = None if psw is None else psw[keep]
    emb = Embedding.apply(weight, flat, padding_idx=None, scale_grad_by_freq=scale_grad_by_freq)  # (n, dim)
    if psw is not None:
        emb = emb * psw.unsqueeze(1)
    if mode == "max":
        return _bag_max(emb, ids, num_bags)
    out = IndexBackward.apply(emb, shape=(num_bags, dim), index=(ids,))  # (bags, dim): the sum of each bag
    if mode == "mean":
        counts = flat._ops.bag_counts(ids, num_bags).clip(1, None).astype(emb._dtype.np)
        out = out / _make(counts, emb._dtype, emb._device, emb._ops).unsqueeze(1)
    return out


def _bag_max(emb: Tensor, ids: Any, num_bags: int) -> Tensor:
    """Per bag, the elementwise max of its embeddings (0 for an empty bag); the gradient goes to the first max."""
    ops = emb._ops
    positions = _make(ops.bag_positions(ids, num_bags), dtypes.int64, emb._device, ops)  # (bags, longest)
    if positions.shape[1] == 0:
        return emb.new_zeros((num_bags, emb.shape[1]))
    padded = cat([emb, emb.new_full((1, emb.shape[1]), float("-inf"))])[positions]  # (bags, longest, dim)
    values = padded.max(dim=1).values
    return where(values == float("-inf"), 0.0, values)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 (*, num_classes) with a 1 at each index (num_classes=-1: the largest index + 1)."""
    if tensor._dtype is not dtypes.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    data = tensor._data
    if num_classes == -1:
        if not data.size:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(data.max()) + 1
    if data.size and data.min() < 0:
        raise RuntimeError("Class values must be non-negative.")
    if data.size and data.max() >= num_classes:
        raise RuntimeError("Class values must be smaller than num_classes.")
    classes = arange(num_classes, device=tensor.device)
    return (tensor.unsqueeze(-1) == classes).to(dtypes.int64)
