"""`torch.distributed.tensor`: importable (transformers 4.x imports it at the top of modeling_utils), with its
type names for `isinstance` checks; serve has no distributed tensors, so nothing is ever one of them."""

from __future__ import annotations


class DTensor:
    """No serve tensor is a DTensor."""


class Placement:
    pass


class Replicate(Placement):
    pass


class Shard(Placement):
    def __init__(self, dim: int = 0) -> None:
        self.dim = dim
