"""Keeping freed activation buffers in the process heap instead of handing them back to the kernel.

glibc's malloc serves every block above its mmap threshold (128 KiB, raised on the fly up to 32 MiB) with a
fresh mmap and unmaps it on free. A forward pass allocates and frees arrays of megabytes in every layer, so each
one pays a page fault per 4 KiB page on first touch: a third of ResNet-18's max pool and batch norm time at
batch 8. Pinning the mmap threshold at its 32 MiB ceiling and raising the trim threshold keeps those blocks in
the heap, where the next layer reuses them already mapped. The cost is a resident set that stays near its peak
(the working set of one forward pass), which is what an inference worker holds anyway.

Applied once when the CPU backend loads, only with glibc (where `mallopt` exists); elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit systems
TRIM_THRESHOLD = 1 << 30


def keep_freed_buffers() -> bool:
    """Set glibc's thresholds as described above; True when they were set."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return False
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
