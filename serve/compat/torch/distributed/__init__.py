"""`torch.distributed`: not available on serve (one worker process, one model replica), as in a torch build
without it: `is_available()` is False, so libraries take their single-process path."""

from __future__ import annotations


def is_available() -> bool:
    return False


def is_initialized() -> bool:
    return False
