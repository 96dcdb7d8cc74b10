"""`torch.futures`: the `Future` type (captum imports it for its asynchronous attributions); serve runs every call
synchronously, so no value is ever one, and making one raises."""

from __future__ import annotations

from typing import Any


class Future:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("torch.futures.Future is not available on serve: every call runs synchronously")

    def __class_getitem__(cls, item: Any) -> type:  # Future[Tensor] in annotations
        return cls


def collect_all(futures: list[Any]) -> Any:
    raise RuntimeError("torch.futures.collect_all is not available on serve: every call runs synchronously")
