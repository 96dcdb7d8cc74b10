"""`torch.utils.data` on serve: the basics handlers use to batch their inputs (Dataset, TensorDataset, DataLoader).

Small on purpose: DataLoader iterates a map-style dataset in order (or shuffled with serve's generator), groups
`batch_size` items and collates them as torch's default collate does for tensors, numbers, tuples and dicts.
No worker processes, samplers or pinned memory (the options are accepted and must be their defaults).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import serve


class Dataset:
    """A map-style dataset: subclasses define `__getitem__` (and `__len__` for DataLoader)."""

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")


class TensorDataset(Dataset):
    """Item i is the tuple of every tensor's row i; the tensors must share their first dimension."""

    def __init__(self, *tensors: Any) -> None:
        sizes = {int(t.shape[0]) for t in tensors}
        if len(sizes) > 1:
            raise ValueError(f"TensorDataset: tensors must have the same first dimension, got sizes {sorted(sizes)}")
        self.tensors = tensors

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return int(self.tensors[0].shape[0]) if self.tensors else 0


def default_collate(batch: Sequence[Any]) -> Any:
    """Tensors stacked, numbers as a tensor, tuples/lists and dicts collated field by field, anything else a list."""
    first = batch[0]
    if isinstance(first, serve.Tensor):
        return serve.stack(list(batch))
    if isinstance(first, bool | int | float):
        return serve.tensor(list(batch))
    if isinstance(first, dict):
        return {key: default_collate([item[key] for item in batch]) for key in first}
    if isinstance(first, tuple | list):
        return [default_collate(list(field)) for field in zip(*batch, strict=True)]
    return list(batch)


class DataLoader:
    """Batches of `batch_size` items of `dataset` (the last one shorter unless drop_last), collated."""

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool = False, num_workers: int = 0,
                 collate_fn: Callable[[list[Any]], Any] | None = None, drop_last: bool = False,
                 generator: Any = None, **options: Any) -> None:  # fmt: skip
        if num_workers:
            raise ValueError("DataLoader(num_workers>0) is not supported on serve: use num_workers=0")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be a positive integer or None, got {batch_size}")
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, batch_size, shuffle, drop_last
        self.collate_fn = collate_fn or (default_collate if batch_size is not None else (lambda item: item))
        self.generator = generator

    def _order(self) -> list[int]:
        n = len(self.dataset)
        return serve.randperm(n, generator=self.generator).tolist() if self.shuffle else list(range(n))

    def __iter__(self) -> Iterator[Any]:
        order = self._order()
        if self.batch_size is None:
            yield from (self.collate_fn(self.dataset[i]) for i in order)
            return
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            if len(chunk) < self.batch_size and self.drop_last:
                return
            yield self.collate_fn([self.dataset[i] for i in chunk])

    def __len__(self) -> int:
        n = len(self.dataset)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
