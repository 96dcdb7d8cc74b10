"""`OpenConnections`: every client connection the server process holds, REST and gRPC together, under one cap.

Each connection is a file descriptor. Before this cap, 1,100 connections that each held an unfinished request
exhausted a server with 1,024 descriptors, and for as long as they were held the readiness probe (`/ping`) and
every other client failed. Decisions, and why:
- One cap for both protocols (`max_connections`), because they share the process's descriptors. Its default is
  the soft RLIMIT_NOFILE less a reserve (RESERVED_FDS, or an eighth of the limit if that is more) for what else
  the server opens: worker pipes, archives, model files, logs. So the cap, not the descriptors, runs out first,
  and the accept loops never see EMFILE.
- A connection past the cap evicts the quietest one, the connection that has done nothing for its client for
  longest: REST, one waiting for a request's headers or idle between requests; gRPC, one with no call in flight
  or whose only calls are uploads that stopped. One that has never been answered goes before one that has (a
  hoarder's connections never ask for anything, while a client's connection idles between its calls: in a burst
  of new connections the client's pause between two calls can be older than the newest hoarders). A connection
  serving a request (its request whole, its answer not yet sent) is never evicted. So a new connection, the readiness
  probe among them, always gets in while some connection is merely held open, which is what a client hoarding
  connections does. When every connection is serving, the new one is closed at once: the server is at capacity, not
  under a hoarder.
- Finding the quietest is a scan of the open connections, done only past the cap (when a hoarder is at work),
  not on every accept.
"""

from __future__ import annotations

import logging
import resource
from typing import Protocol

log = logging.getLogger(__name__)

RESERVED_FDS = 64


class Evictable(Protocol):
    served: bool  # it has answered a request (evicted after those that never have)

    def quiet_since(self) -> float | None:
        """Since when it has done nothing for its client (None: it is serving a request, keep it)."""

    def evict(self) -> None:
        """Close it now: the server needs its descriptor."""


def eviction_order(connection: Evictable, quiet: float) -> tuple[bool, float]:
    """The key that puts the connection to evict first (quiet since `quiet`) first: never answered, then longest
    quiet."""
    return connection.served, quiet


def default_max_connections() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(16, soft - max(RESERVED_FDS, soft // 8))


class OpenConnections:
    def __init__(self, cap: int | None = None) -> None:
        self.cap = cap if cap is not None else default_max_connections()
        self._open: dict[Evictable, None] = {}
        self.evicted = self.refused = 0

    def __len__(self) -> int:
        return len(self._open)

    def opened(self, connection: Evictable) -> bool:
        """Count a new connection in; False when it must be closed at once (every other one is serving)."""
        self._open[connection] = None
        if len(self._open) <= self.cap:
            return True
        victim = self._quietest(connection)
        if victim is None:
            del self._open[connection]
            self.refused += 1
            log.warning("%d connections open, all serving a request (max_connections): a new one was closed",
                        len(self._open))  # fmt: skip
            return False
        del self._open[victim]
        self.evicted += 1
        victim.evict()
        return True

    def closed(self, connection: Evictable) -> None:
        self._open.pop(connection, None)

    def _quietest(self, newcomer: Evictable) -> Evictable | None:
        quietest, rank = None, (True, float("inf"))
        for connection in self._open:
            if connection is newcomer:
                continue
            quiet = connection.quiet_since()
            if quiet is not None and eviction_order(connection, quiet) < rank:
                quietest, rank = connection, eviction_order(connection, quiet)
        return quietest
