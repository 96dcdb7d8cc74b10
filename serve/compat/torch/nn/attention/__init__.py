"""`torch.nn.attention`: the attention backend selector. serve picks its own attention kernels, so
`sdpa_kernel(...)` is a context that changes nothing; `flex_attention` is importable but not implemented."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from typing import Any


class SDPBackend(enum.IntEnum):
    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3


@contextlib.contextmanager
def sdpa_kernel(backends: Any, set_priority: bool = False) -> Iterator[None]:
    yield
