"""`trim_soon()`: give the memory a burst of large request buffers used back to the system once they are freed.

CPython hands buffers of more than 512 bytes to the C allocator. glibc keeps what is freed in its heap for reuse,
and after a client has streamed tens of megabytes in 16 KiB frames that heap is fragmented, so the server's RSS
stayed at its peak after the connection closed (85 -> 170 MB for one window-flood connection, for good).
`malloc_trim(0)` returns the free pages (85 MB again). Called when a connection that received more than
TRIM_AFTER_BYTES closes, run TRIM_DELAY later (its calls' buffers are freed by then) and at most once per
TRIM_INTERVAL, so a stream of large uploads costs one trim (a few milliseconds) per interval, not one per
connection. A no-op where the C library is not glibc.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

TRIM_AFTER_BYTES = 4 << 20
TRIM_DELAY = 1.0
TRIM_INTERVAL = 1.0


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim with
        return None


_TRIM = _malloc_trim()
_scheduled = False
_last = 0.0


def trim_soon() -> None:
    """Trim the C heap TRIM_DELAY from now, unless one is scheduled or ran within TRIM_INTERVAL."""
    global _scheduled
    if _TRIM is None or _scheduled:
        return
    _scheduled = True
    delay = max(TRIM_DELAY, _last + TRIM_INTERVAL - time.monotonic())
    asyncio.get_running_loop().call_later(delay, _trim)


def _trim() -> None:
    global _scheduled, _last
    _scheduled = False
    _last = time.monotonic()
    assert _TRIM is not None
    _TRIM(0)
