"""Stateful sequences (TorchServe's sequence batching, Triton's sequence batcher): every request of a sequence goes to
the one worker that holds its state, one at a time, in the order they came.

    settings = sequence_settings(yaml, where)          # None unless the model-config says `sequenceBatching: true`
    router = SequenceRouter(name, version, settings, pool.sequence_slots)
    router.submit(job)                                 # raises at once: 400 (closed/unknown), 503 (cap, backlog)

A sequence is named by the request header `ts_request_sequence_id` (TorchServe's; `ts_request_sequence_start` and
`ts_request_sequence_end` are "true" on its first and last request). The v2 frontends turn Triton's `sequence_id`,
`sequence_start` and `sequence_end` request parameters into the same headers (serve/frontends/oip/sequence.py), so
one router serves both protocols; a request tagged `x-serve-protocol: v2` follows Triton's rules where they differ.

Decisions, and why:
- A TorchServe request without the id header starts a new sequence with the id `ts-seq-<uuid>` and the start
  header, as TorchServe's frontend does; the answer carries the id in the `ts_request_sequence_id` response header
  (TorchServe does not send it back, which leaves a client no way to continue the sequence it started). An id the
  server has never seen starts a sequence too (TorchServe's own stateful test sends its ids from the first
  request). Triton's rule for v2: a new id needs `sequence_start` (400 otherwise, as Triton answers).
- The worker: a new sequence goes to the live worker holding the fewest open sequences, and stays there. Each
  worker has its own job queue, fed only by its sequences (WorkerPool.sequence_slots). One request of a sequence
  is with the worker at a time; the next waits in the sequence's backlog until it is answered, so a batch never
  holds two requests of one sequence and their order is kept (TorchServe's job groups do the same). The backlog
  holds `maxSequenceJobQueueSize` requests (TorchServe's default 1); one more is a 503 with TorchServe's message.
- `maxNumSequence` (TorchServe's default 1) open sequences per model version; a request that would open one more is
  a 503 saying so (TorchServe's message, then the numbers). TorchServe divides the cap among the workers; here it is
  the version's, and the workers are balanced by count.
- A sequence is freed when its last request (end header) is answered, or when it has been idle (nothing queued or
  running) for `sequenceMaxIdleMSec` (0 or unset: 60000; TorchServe's 0 would expire a sequence between any two
  requests), or, with `sequenceTimeoutMSec` over 0, once it is older than that (a request then is a 400; the
  requests already taken are answered). The ids of the last CLOSED_REMEMBERED closed sequences are remembered: a
  request to one without the start flag is a 400 that says it was ended, expired or timed out and how to start
  again (TorchServe would silently open a new sequence on another worker, without the state).
- A start flag on an open sequence restarts it on the same worker (the handler sees the start header and resets).
- When the worker of a sequence stops (scale down), its queued requests fail with 503 and the sequence is closed.
  A worker process that died and was restarted has lost the state of its sequences (the handler's memory): the
  next request of such a sequence is a 503 saying so, and the sequence is closed, rather than answered from a
  fresh state as if nothing happened (TorchServe does that). The process a sequence lives in is the one that
  answered its first request (WorkerSlot.generation counts the slot's processes).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from serve.batching import JobQueue
from serve.batching.envelopes import PROTOCOL_HEADER
from serve.batching.job import Job
from serve.errors import InvalidInput, ModelNotReady, QueueFull

log = logging.getLogger(__name__)

SEQUENCE_ID = "ts_request_sequence_id"  # TorchServe's header names
SEQUENCE_START, SEQUENCE_END = "ts_request_sequence_start", "ts_request_sequence_end"
DEFAULT_IDLE_MS = 60_000
CLOSED_REMEMBERED = 4096
# key -> smallest valid value
KEYS = {"maxNumSequence": 1, "maxSequenceJobQueueSize": 1, "sequenceMaxIdleMSec": 0, "sequenceTimeoutMSec": 0}


@dataclass(frozen=True)
class SequenceSettings:
    max_num_sequence: int = 1  # TorchServe's default
    max_job_queue: int = 1  # maxSequenceJobQueueSize: requests waiting behind the one with the worker
    max_idle_ms: int = DEFAULT_IDLE_MS
    timeout_ms: int = 0  # sequenceTimeoutMSec: the longest a sequence may last (0: no limit)


def is_true(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def sequence_settings(yaml: Mapping[str, Any], where: str) -> SequenceSettings | None:
    """The model-config's sequence batching settings; None without `sequenceBatching: true`. A bad value is a 400."""
    if not is_true(yaml.get("sequenceBatching")):
        return None
    if is_true(yaml.get("continuousBatching")):
        raise InvalidInput(f"{where}: sequenceBatching and continuousBatching together are not supported by serve; "
                           "keep one of them")  # fmt: skip
    values = {}
    for key, lowest in KEYS.items():
        value = yaml.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < lowest):
            raise InvalidInput(f"{where}: {key}={value!r} is not valid: expected an integer >= {lowest}")
        values[key] = value
    return SequenceSettings(values["maxNumSequence"] or 1, values["maxSequenceJobQueueSize"] or 1,
                            values["sequenceMaxIdleMSec"] or DEFAULT_IDLE_MS,
                            values["sequenceTimeoutMSec"] or 0)  # fmt: skip


class Slot(Protocol):
    """What the router needs of a worker slot (serve/management/worker_slot.py)."""

    id: str
    queue: JobQueue | None
    generation: int  # how many processes the slot started


@dataclass
class _Sequence:
    id: str
    slot: Slot
    backlog: deque[Job] = field(default_factory=deque)
    running: Job | None = None
    ended: bool = False  # its end request came: nothing more is taken without a start flag
    generation: int | None = None  # the slot's process that holds its state (set at its first answer)
    last: float = field(default_factory=time.monotonic)
    opened: float = field(default_factory=time.monotonic)


class SequenceRouter:
    """The open sequences of one model version and the worker each is pinned to."""

    def __init__(self, name: str, version: str, settings: SequenceSettings,
                 slots: Callable[[], Sequence[Slot]]) -> None:  # fmt: skip
        self.name, self.version, self.settings, self._slots = name, version, settings, slots
        self.open: dict[str, _Sequence] = {}
        self.closed: OrderedDict[str, str] = OrderedDict()  # id -> why it closed ("ended", "expired", ...)
        self._sweeper: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    def submit(self, job: Job) -> str:
        """Route `job` to its sequence's worker, or queue it behind the sequence's running request; its sequence id
        (the answer carries it in the `ts_request_sequence_id` header)."""
        headers = job.request.headers
        triton = headers.get(PROTOCOL_HEADER) == "v2"
        sequence_id = str(headers.get(SEQUENCE_ID) or "")
        start, end = is_true(headers.get(SEQUENCE_START)), is_true(headers.get(SEQUENCE_END))
        if not sequence_id:
            if triton:
                raise InvalidInput(f"model {self.name} is a sequence model (sequenceBatching): set the "
                                   "request parameter sequence_id (non-zero), with sequence_start on its first "
                                   "request")  # fmt: skip
            sequence_id, start = f"ts-seq-{uuid.uuid4()}", True
        seq = self.open.get(sequence_id)
        if seq is not None and self._timed_out(seq, time.monotonic()) and not start:
            self._close(seq, f"timed out (sequenceTimeoutMSec={self.settings.timeout_ms})")
            raise InvalidInput(self._closed_message(sequence_id, self.closed[sequence_id]))
        if seq is None or (seq.ended and start and not seq.running and not seq.backlog):
            if seq is None:
                self._check_new(sequence_id, start, triton)
            seq = self._open(sequence_id)
            start = True
        elif seq.ended and not start:
            raise InvalidInput(self._closed_message(sequence_id, "ended"))
        elif start:  # restarted: its state starts again, in whichever process its worker runs now
            seq.generation, seq.opened = None, time.monotonic()
        if len(seq.backlog) >= self.settings.max_job_queue and seq.running is not None:
            raise QueueFull(f"{self._no_worker()} Sequence {sequence_id} already has "
                            f"{len(seq.backlog)} requests waiting (maxSequenceJobQueueSize="
                            f"{self.settings.max_job_queue}): wait for its answers")  # fmt: skip
        headers[SEQUENCE_ID] = sequence_id
        for flag, on in ((SEQUENCE_START, start), (SEQUENCE_END, end)):  # present only when true, as TorchServe sends
            if on:  # them (its handlers test the header's presence)
                headers[flag] = "true"
            else:
                headers.pop(flag, None)
        seq.ended = (seq.ended and not start) or end
        seq.backlog.append(job)
        self._idle.clear()
        self._feed(seq)
        self._start_sweeper()
        return sequence_id

    def _check_new(self, sequence_id: str, start: bool, triton: bool) -> None:
        why = self.closed.get(sequence_id)
        if not start and (why is not None or triton):
            raise InvalidInput(self._closed_message(sequence_id, why))
        if len(self.open) >= self.settings.max_num_sequence:
            raise ModelNotReady(f"{self._no_worker()} This model already has {len(self.open)} open sequences "
                                f"(maxNumSequence={self.settings.max_num_sequence}): end one (its last request with "
                                f"{SEQUENCE_END}: true, or sequence_end), wait for one to idle out "
                                f"(sequenceMaxIdleMSec={self.settings.max_idle_ms}), or raise "
                                "maxNumSequence")  # fmt: skip

    def _open(self, sequence_id: str) -> _Sequence:
        slots = [s for s in self._slots() if s.queue is not None]
        if not slots:
            raise ModelNotReady(self._no_worker())
        load = {s.id: 0 for s in slots}
        for seq in self.open.values():
            if seq.slot.id in load:
                load[seq.slot.id] += 1
        slot = min(slots, key=lambda s: load[s.id])
        self.closed.pop(sequence_id, None)
        seq = self.open[sequence_id] = _Sequence(sequence_id, slot)
        log.info("model %s version %s: sequence %s opened on worker %s", self.name, self.version, sequence_id, slot.id)
        return seq

    def _feed(self, seq: _Sequence) -> None:
        """Hand the sequence's next request to its worker when none is running."""
        while seq.running is None and seq.backlog:
            job = seq.backlog.popleft()
            if job.done:
                continue
            queue = seq.slot.queue
            if queue is None or seq.slot not in self._slots():  # its worker stopped: the state is gone
                self._fail(seq, job, "stopped")
                return
            if seq.generation is not None and seq.generation != seq.slot.generation:
                self._fail(seq, job, "was restarted (its process died)")
                return
            seq.running = job
            job.future.add_done_callback(lambda _, job=job: self._answered(seq, job))  # type: ignore[misc]
            queue.put(job)
        self._maybe_close(seq)

    def _answered(self, seq: _Sequence, job: Job) -> None:
        seq.running, seq.last = None, time.monotonic()
        if seq.generation is None and not job.future.cancelled() and job.future.exception() is None:
            seq.generation = seq.slot.generation
        self._feed(seq)

    def _maybe_close(self, seq: _Sequence) -> None:
        if seq.running is None and not seq.backlog:
            if seq.ended:
                self._close(seq, "ended")
            self._check_idle()

    def _fail(self, seq: _Sequence, job: Job, what: str) -> None:
        error = (f"{self._no_worker()} Worker {seq.slot.id}, which held sequence {seq.id}, {what}: its state is "
                 "lost; start a new sequence")  # fmt: skip
        for waiting in [job, *seq.backlog]:
            waiting.fail(ModelNotReady(error))
        seq.backlog.clear()
        self._close(seq, f"lost (its worker {what})")
        self._check_idle()

    def _close(self, seq: _Sequence, why: str) -> None:
        if self.open.get(seq.id) is seq:
            del self.open[seq.id]
            self.closed[seq.id] = why
            while len(self.closed) > CLOSED_REMEMBERED:
                self.closed.popitem(last=False)
            log.info("model %s version %s: sequence %s %s", self.name, self.version, seq.id, why)

    def _check_idle(self) -> None:
        if all(s.running is None and not s.backlog for s in self.open.values()):
            self._idle.set()

    def expire_idle(self, now: float | None = None) -> list[str]:
        """Close the sequences idle for longer than sequenceMaxIdleMSec; their ids."""
        now = time.monotonic() if now is None else now
        limit = self.settings.max_idle_ms / 1000.0
        idle = [s for s in self.open.values() if s.running is None and not s.backlog
                and (now - s.last > limit or self._timed_out(s, now))]  # fmt: skip
        for seq in idle:
            why = f"expired (idle for more than sequenceMaxIdleMSec={self.settings.max_idle_ms})"
            if self._timed_out(seq, now):
                why = f"timed out (sequenceTimeoutMSec={self.settings.timeout_ms})"
            self._close(seq, why)
        return [s.id for s in idle]

    def _timed_out(self, seq: _Sequence, now: float) -> bool:
        return self.settings.timeout_ms > 0 and now - seq.opened > self.settings.timeout_ms / 1000.0

    def _start_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name=f"sequences {self.name}")

    async def _sweep(self) -> None:
        period = min(max(self.settings.max_idle_ms / 4000.0, 0.005), 1.0)
        while self.open:
            await asyncio.sleep(period)
            self.expire_idle()

    async def drained(self) -> None:
        """Return once no request of any sequence is queued or running."""
        await self._idle.wait()

    def close(self, error: Callable[[], BaseException]) -> None:
        """Unregistering: fail what waits in the backlogs, forget every sequence, stop the sweeper."""
        for seq in list(self.open.values()):
            for job in seq.backlog:
                job.fail(error())
            seq.backlog.clear()
        self.open.clear()
        self._idle.set()
        if self._sweeper is not None:
            self._sweeper.cancel()

    def describe(self) -> dict[str, Any]:
        s = self.settings
        return {"stateful": True, "sequenceMaxIdleMSec": s.max_idle_ms, "sequenceTimeoutMSec": s.timeout_ms,
                "maxNumSequence": s.max_num_sequence, "maxSequenceJobQueueSize": s.max_job_queue,
                "openSequences": len(self.open)}  # fmt: skip

    def _closed_message(self, sequence_id: str, why: str | None) -> str:
        state = "is not open" if why is None else f"was {why}"
        return (f"Sequence {sequence_id} of model {self.name} {state}: start a sequence with "
                f"{SEQUENCE_START}: true (sequence_start on the v2 protocol), or send a request without "
                f"{SEQUENCE_ID} to get a new id")  # fmt: skip

    def _no_worker(self) -> str:
        return (f'Model "{self.name}" Version {self.version} has no worker to serve inference request. Please use '
                "scale workers API to add workers. If this is a sequence inference, please check if it is closed, "
                "or expired; or exceeds maxSequenceJobQueueSize.")  # fmt: skip
