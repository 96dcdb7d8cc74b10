"""`nn.Embedding` and `nn.EmbeddingBag`, with PyTorch's arguments (padding_idx, max_norm, `_weight`, ...),
initialisation (N(0, 1), padding row zeroed) and `from_pretrained`."""

from __future__ import annotations

from typing import Any

from serve.nn import init
from serve.nn.functional.sparse import embedding, embedding_bag
from serve.nn.module import Module
from serve.nn.parameter import Parameter
from serve.tensor.creation import empty
from serve.tensor.grad_mode import no_grad
from serve.tensor.tensor import Tensor

__all__ = ["Embedding", "EmbeddingBag"]


def _checked_padding_idx(padding_idx: int | None, num_embeddings: int) -> int | None:
    if padding_idx is None:
        return None
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError("Padding_idx must be within num_embeddings")
    return padding_idx % num_embeddings


class _EmbeddingBase(Module):
    """The weight (num_embeddings, embedding_dim) and its options, shared by Embedding and EmbeddingBag."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None, max_norm: float | None,
                 norm_type: float, scale_grad_by_freq: bool, sparse: bool, _weight: Tensor | None,
                 _freeze: bool, device: Any, dtype: Any) -> None:  # fmt: skip
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.padding_idx = _checked_padding_idx(padding_idx, num_embeddings)
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        if _weight is None:
            weight = empty((num_embeddings, embedding_dim), device=device, dtype=dtype)
            self.weight = Parameter(weight, requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError("Shape of weight does not match num_embeddings and embedding_dim")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        self._fill_padding_idx_with_zero()

    def _fill_padding_idx_with_zero(self) -> None:
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx].fill_(0)

    def _options_repr(self) -> str:
        s = ""
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq is not False:
            s += f", scale_grad_by_freq={self.scale_grad_by_freq}"
        return s


class Embedding(_EmbeddingBase):
    """A lookup table: `Embedding(10, 3)(serve.tensor([1, 4]))` is rows 1 and 4 of the (10, 3) weight."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Tensor | None = None, _freeze: bool = False, device: Any = None,
                 dtype: Any = None) -> None:  # fmt: skip
        super().__init__(num_embeddings, embedding_dim, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                         _weight, _freeze, device, dtype)  # fmt: skip

    def forward(self, input: Tensor) -> Tensor:
        return embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                         self.scale_grad_by_freq, self.sparse)  # fmt: skip

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        s += self._options_repr()
        return s + (", sparse=True" if self.sparse else "")

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True, padding_idx: int | None = None,
                        max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        sparse: bool = False) -> Embedding:  # fmt: skip
        """An Embedding whose weight is `embeddings` (2-D), frozen unless freeze=False."""
        if embeddings.ndim != 2:
            raise ValueError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse, _weight=embeddings,
                   _freeze=freeze)  # fmt: skip


class EmbeddingBag(_EmbeddingBase):
    """Sums, means or maxes of bags of embeddings, without materialising the individual lookups' layer."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                 _weight: Tensor | None = None, include_last_offset: bool = False, padding_idx: int | None = None,
                 device: Any = None, dtype: Any = None) -> None:  # fmt: skip
        super().__init__(num_embeddings, embedding_dim, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                         _weight, False, device, dtype)  # fmt: skip
        self.mode = mode
        self.include_last_offset = include_last_offset

    def forward(self, input: Tensor, offsets: Tensor | None = None,
                per_sample_weights: Tensor | None = None) -> Tensor:  # fmt: skip
        return embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                             self.mode, self.sparse, per_sample_weights, self.include_last_offset,
                             self.padding_idx)  # fmt: skip

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}" + self._options_repr() + f", mode={self.mode!r}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True, max_norm: float | None = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                        sparse: bool = False, include_last_offset: bool = False,
                        padding_idx: int | None = None) -> EmbeddingBag:  # fmt: skip
        if embeddings.ndim != 2:
            raise ValueError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        bag = cls(rows, cols, max_norm, norm_type, scale_grad_by_freq, mode, sparse, embeddings, include_last_offset,
                  padding_idx)  # fmt: skip
        bag.weight.requires_grad_(not freeze)
        return bag
