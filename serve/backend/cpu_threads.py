"""The CPU backend's threads: `lanes` that split one operation's work, and the BLAS kept single-threaded under them.

numpy runs elementwise work on one core, and OpenBLAS parallelizes each product on its own pool whose threads
spin for about 0.1 s after every call. Mixing the two on a small machine loses both ways: the copies around a
convolution's products run on one core while the other waits, and a spinning BLAS thread takes the core any other
worker thread wants. So, like PyTorch's intra-op pool, serve owns the threads end to end:

- numpy's OpenBLAS is set to one thread (found in the loaded libraries; `blas_controlled()` says whether it was);
- `parallel(fn, spans)` runs `fn(start, stop)` for each span on its own lane (the calling thread takes the first),
  with numpy releasing the GIL inside each lane's copies and products.

The number of lanes is `serve.get_num_threads()`, set with `serve.set_num_threads(n)` as in PyTorch. It defaults to
OMP_NUM_THREADS (then OPENBLAS_NUM_THREADS, then the CPUs this process may use), so a worker started with
`OMP_NUM_THREADS=2` uses two lanes. Setting one thread runs everything inline. Where serve cannot reach the BLAS
(numpy built on MKL or Accelerate) products are left to the BLAS's own threads and only the work around them is
split. Nested calls (a lane calling `parallel`) and calls from a second thread while the lanes are busy run inline,
so nothing waits on itself. A split never changes an elementwise result; a split product may differ in the last
bit from the whole one (the BLAS blocks it differently), as PyTorch's do across thread counts.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import queue
import re
import threading
from collections.abc import Callable, Sequence

__all__ = ["SPLIT_BYTES", "blas_controlled", "get_num_threads", "hold_blas", "memory_spans", "parallel",
           "set_num_threads", "spans"]  # fmt: skip

Span = tuple[int, int]
SPLIT_BYTES = 1 << 20  # elementwise work on less than this gains less from a second lane than the ~70 us hand-off
_BLAS_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
                 "openblas_set_num_threads")  # fmt: skip


def _default_threads() -> int:
    for key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        value = os.environ.get(key, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _openblas_setter() -> Callable[[int], None] | None:
    """numpy's OpenBLAS `set_num_threads`, from the libraries this process has loaded (Linux), or None."""
    import numpy  # noqa: F401  (loads the BLAS this looks for)

    try:
        with open("/proc/self/maps") as maps:
            paths = sorted(set(re.findall(r"(/\S*openblas\S*\.so\S*)", maps.read())))
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _BLAS_SETTERS:
            setter = getattr(lib, name, None)
            if setter is not None:
                setter.argtypes, setter.restype = [ctypes.c_int], None
                return setter
    return None


_Task = tuple[Callable[[int, int], object], Span, "queue.SimpleQueue[BaseException | None]"]


class _Lanes:
    """`count - 1` daemon threads, each taking (fn, span, done) from its own queue; the caller is lane 0."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.busy = threading.Lock()
        self.closed = self.stopped = False
        self.inboxes: list[queue.SimpleQueue[_Task | None]] = []
        for i in range(count - 1):
            inbox: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), name=f"serve-lane-{i + 1}", daemon=True).start()
            self.inboxes.append(inbox)

    def close(self) -> None:
        """Let the threads exit once they have finished what is queued: now if no call holds the lanes, else when
        that call lets go of them (see `parallel`), so no task is ever queued behind the stop."""
        self.closed = True
        if self.busy.acquire(blocking=False):
            try:
                self.stop()
            finally:
                self.busy.release()

    def stop(self) -> None:
        """Queue the stop for every thread, once; called with `busy` held."""
        if not self.stopped:
            self.stopped = True
            for inbox in self.inboxes:
                inbox.put(None)

    @staticmethod
    def _serve(inbox: queue.SimpleQueue[_Task | None]) -> None:
        _local.in_lane = True
        while (task := inbox.get()) is not None:
            fn, (start, stop), done = task
            try:
                fn(start, stop)
                done.put(None)
            except BaseException as e:  # handed to the caller, which raises it
                done.put(e)

    def run(self, fn: Callable[[int, int], object], parts: Sequence[Span]) -> None:
        # a queue per call: a caller interrupted while waiting (Ctrl-C) leaves its late answers in its own queue
        done: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        for inbox, span in zip(self.inboxes, parts[1:]):
            inbox.put((fn, span, done))
        error: BaseException | None = None
        try:
            fn(*parts[0])
        except BaseException as e:
            error = e
        for _ in parts[1:]:  # every lane finishes before the caller goes on: they write into its arrays
            lane_error = done.get()
            error = error or lane_error
        if error is not None:
            raise error


_local = threading.local()
_state: dict[str, object] = {"threads": _default_threads(), "lanes": None, "blas": None}
_setup = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's lane threads: start fresh ones on first use."""
    global _setup
    _setup = threading.Lock()
    _state["lanes"] = None
    _local.in_lane = False


os.register_at_fork(after_in_child=_after_fork_in_child)


def get_num_threads() -> int:
    """The number of lanes serve splits one CPU operation across (PyTorch's `torch.get_num_threads`)."""
    return int(_state["threads"])  # type: ignore[call-overload]


def set_num_threads(n: int) -> None:
    """Use `n` lanes for CPU operations from now on (PyTorch's `torch.set_num_threads`); 1 runs everything inline."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads: expected a positive integer, got {n!r}")
    with _setup:
        if n == _state["threads"]:
            return
        _state["threads"] = n
        old, _state["lanes"] = _state["lanes"], None
    if isinstance(old, _Lanes):
        old.close()


def hold_blas() -> bool:
    """Set numpy's OpenBLAS to one thread (once; the CPU backend does it when it loads); True when it could."""
    with _setup:
        if _state["blas"] is None:
            setter = _openblas_setter()
            if setter is not None:
                setter(1)
            _state["blas"] = setter is not None
    return bool(_state["blas"])


def blas_controlled() -> bool:
    """True when serve holds numpy's BLAS to one thread, so products may be split across lanes."""
    return bool(_state["blas"])


def _lanes() -> _Lanes | None:
    lanes = _state["lanes"]
    if lanes is None:
        with _setup:
            if _state["lanes"] is None and get_num_threads() > 1:
                _state["lanes"] = _Lanes(get_num_threads())
            lanes = _state["lanes"]
    return lanes  # type: ignore[return-value]


def spans(n: int, parts: int | None = None, grain: int = 1) -> list[Span]:
    """[start, stop) ranges splitting range(n) into at most `parts` (default: the lane count) near-equal runs,
    each a multiple of `grain` long except the last."""
    units = -(-n // grain)
    count = max(1, min(parts or get_num_threads(), units))
    bounds = [min(n, (units * i // count) * grain) for i in range(count + 1)]
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


def memory_spans(n: int, nbytes: int, grain: int = 1) -> list[Span]:
    """`spans(n, grain=grain)` for work that passes over `nbytes` of memory; one span when that is too little to
    pay for a hand-off (SPLIT_BYTES)."""
    return [(0, n)] if nbytes < SPLIT_BYTES else spans(n, grain=grain)


def parallel(fn: Callable[[int, int], object], parts: Sequence[Span]) -> None:
    """Run fn(start, stop) for every span, one span per lane, and return when all have; the first error raised
    in any lane is raised here. Inline when there is one span, one lane, or the lanes are in use."""
    lanes = _lanes() if len(parts) > 1 else None
    if lanes is None or getattr(_local, "in_lane", False) or len(parts) > lanes.count:
        for span in parts:
            fn(*span)
        return
    if not lanes.busy.acquire(blocking=False):
        for span in parts:
            fn(*span)
        return
    _local.in_lane = True
    try:
        if lanes.closed:  # set_num_threads replaced them after this call picked them up
            for span in parts:
                fn(*span)
        else:
            lanes.run(fn, parts)
    finally:
        _local.in_lane = False
        if lanes.closed:
            lanes.stop()
        lanes.busy.release()
