"""`MemoryLimit`: how much resident memory one worker of a model version may hold before it is replaced.

    limit = MemoryLimit(configured, workers_running)     # configured: bytes, 0 for none, None for the default
    limit.bytes()                                         # the limit now, None when there is none

The batch loop (batch_loop.py) reads a worker's RSS (/proc/<pid>/statm, one small read) after each batch it
answered; over the limit, the worker is stopped (it holds nothing by then) and a new one started, with a log line
and `ts_worker_restarts_total{reason="memory"}`.

Decisions:
- Configured by model-config `workerMemoryLimit` (or the `models` property), else `worker_memory_limit`, in bytes;
  0 is no limit.
- The default is a share of the host: 80% of the memory the server may use (the container's cgroup limit when it
  is below the machine's MemTotal), divided by the workers running now over all models. It is what keeps every
  worker at its share from exhausting the host, and it follows scaling: one worker on a 16 GiB host may grow to
  12.8 GiB, four may hold 3.2 GiB each.
- A worker already over its limit once its model loaded (`loaded_memory`) is not replaced for it: a new worker
  would be over as well, so replacing it would only reload the model after every batch. A warning says so once per
  worker process, naming the key to raise. The limit is there to catch growth (a handler that keeps memory per
  request), not to refuse big models.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

DEFAULT_SHARE = 0.8  # of the memory the server may use, shared by the workers
CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


@functools.cache
def usable_memory() -> int:
    """Bytes of memory this server's processes may use: MemTotal, or the cgroup's limit when lower (0 if unknown)."""
    total = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    for path in CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and (total == 0 or 0 < int(text) < total):  # "max" / a huge v1 number: no limit
            total = int(text)
    return total


class MemoryLimit:
    """One model version's per-worker limit: `configured` bytes (0: none; None: a share of the host among the
    `workers()` running on this server)."""

    def __init__(self, configured: int | None, workers: Callable[[], int], memory: int | None = None) -> None:
        self.configured, self._workers = configured, workers
        self._memory = memory

    def bytes(self) -> int | None:
        if self.configured is not None:
            return self.configured or None
        memory = usable_memory() if self._memory is None else self._memory
        return int(memory * DEFAULT_SHARE / max(self._workers(), 1)) if memory else None

    def source(self) -> str:
        """The key that set the limit, for messages."""
        if self.configured is not None:
            return "workerMemoryLimit / worker_memory_limit"
        return "80% of the host's memory shared by the workers; set worker_memory_limit or workerMemoryLimit"


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"
