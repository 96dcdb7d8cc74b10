"""`torch.nn.attention.flex_attention`: importable (transformers imports it when torch is recent enough), not
implemented: build the model with `attn_implementation="sdpa"` or `"eager"` (the default), which serve runs."""

from __future__ import annotations

from typing import Any

_NOT_HERE = "flex attention is not available on serve: load the model with attn_implementation='sdpa' or 'eager'"
_mask_mod_signature = Any
_score_mod_signature = Any


class BlockMask:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(_NOT_HERE)

    @classmethod
    def from_kv_blocks(cls, *args: Any, **kwargs: Any) -> BlockMask:
        raise NotImplementedError(_NOT_HERE)


def flex_attention(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(_NOT_HERE)


def create_block_mask(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(_NOT_HERE)


def and_masks(*mask_mods: Any) -> Any:
    raise NotImplementedError(_NOT_HERE)


def or_masks(*mask_mods: Any) -> Any:
    raise NotImplementedError(_NOT_HERE)


_DEFAULT_SPARSE_BLOCK_SIZE = 128


class AuxRequest:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(_NOT_HERE)
