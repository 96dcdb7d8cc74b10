"""`torch.autocast` / `torch.amp`: mixed precision by context. serve runs a model in the dtype its weights have (the
worker's plan may pick bfloat16 products itself: serve.inference), so autocast is never enabled and the context
changes nothing, as torch's does with `enabled=False`."""

from __future__ import annotations

from typing import Any


def is_autocast_enabled(device_type: str | None = None) -> bool:
    return False


def get_autocast_dtype(device_type: str) -> Any:
    from serve.tensor.dtypes import float32

    return float32


class autocast:
    def __init__(self, device_type: str = "cpu", dtype: Any = None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> None:  # fmt: skip
        self.device_type, self.dtype, self.enabled = device_type, dtype, enabled

    def __enter__(self) -> autocast:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __call__(self, fn: Any) -> Any:
        return fn
