"""`torch.xpu`: Intel GPUs, which serve does not drive: never available."""

from __future__ import annotations


def is_available() -> bool:
    return False


def device_count() -> int:
    return 0
