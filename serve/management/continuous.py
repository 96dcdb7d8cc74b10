"""Feeding one continuous worker: jobs go out as they arrive, answers come back by job id, whenever they are ready.

    error = await ContinuousDispatch(worker, queue, max_in_flight, response_timeout, on_send).run(slot)

For a worker whose handler declares `continuous = True` (its ready handshake says so; serve/worker/continuous.py),
the batch loop is replaced by this: no batch is formed and nothing waits for a batch to finish. Each job is sent
alone (`submit {id}`) as soon as the model's queue has one and fewer than `max_in_flight` of this worker's jobs are
unanswered (model-config `continuousMaxInFlight`, default 256); past that, jobs wait in the queue, which stays
bounded (a full queue is 503, as ever). One reader task routes the worker's `chunk`/`result` messages by id:
- the first chunk resolves the job with an InferenceResponse whose `chunks` iterator yields this and later chunks
  (what the frontends already stream: chunked HTTP/1.1, one gRPC message per chunk);
- a result answers it whole (a request whose handler emitted once), ends its stream, or fails it (PredictionException
  with the handler's code; an error after the first chunk ends the stream with it).
Cancellation travels back as `cancel {id}`: when the frontend closes the chunks iterator before the end (the client
disconnected: Starlette and grpc.aio cancel the task reading it), when the job's future is cancelled before its
first chunk (the client left while it waited), and when no message came for the job for `response_timeout` s (its
deadline: RequestTimeout, and the worker, still beating, keeps its other requests). Messages for a job no longer
in flight are dropped, but the handler metrics they carry ("metrics", records of the worker's MetricsCache) are
recorded first, whatever the job's state (`on_metrics`), and so are those of a `metrics` message (what the worker
sends when an emit of a cancelled request is dropped). A worker that dies fails every job in flight with its
"Worker died. ..." error, and the pool restarts it as after a lost batch. Scaling down stops sending and lets the
jobs in flight finish first. Customized describe jobs travel as one-request `batch` messages on the same ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from serve.batching import JobQueue
from serve.batching.job import PREDICT, InferenceResponse, Job
from serve.errors import PredictionException, RequestTimeout, WorkerError
from serve.management.worker_process import WorkerProcess
from serve.worker.protocol import encode_batch

DEFAULT_MAX_IN_FLIGHT = 256
_END = object()


@dataclass
class _Flight:
    job: Job
    last: float = field(default_factory=time.monotonic)  # when the worker last said something about it
    stream: asyncio.Queue[Any] | None = None
    finished: bool = False


class ContinuousDispatch:
    """The jobs in flight on one continuous worker, and the tasks that send them and read their answers."""

    def __init__(self, worker: WorkerProcess, queue: JobQueue, max_in_flight: int, response_timeout: float,
                 on_send: Callable[[Job], None] = lambda job: None,
                 on_metrics: Callable[[list[Any]], None] = lambda records: None) -> None:  # fmt: skip
        self.worker, self.queue, self.on_send, self.on_metrics = worker, queue, on_send, on_metrics
        self.max_in_flight, self.response_timeout = max(1, max_in_flight), response_timeout
        self.flights: dict[int, _Flight] = {}
        self._ids = itertools.count(1)
        self._room: asyncio.Future[None] | None = None
        self.error: str | None = None

    async def run(self, slot: Any) -> str | None:
        """Send jobs until the slot stops (then wait for those in flight) or the worker is lost: its error text."""
        reader = asyncio.create_task(self._read(), name=f"continuous reader {self.worker.id}")
        watchdog = asyncio.create_task(self._watch(), name=f"continuous deadlines {self.worker.id}")
        try:
            while not slot.stopping and self._usable(reader):
                full = len(self.flights) >= self.max_in_flight
                await slot.wait(self._room_future() if full else self.queue.waiter())
                while self._usable(reader) and len(self.flights) < self.max_in_flight:
                    job = None if slot.stopping else self.queue.pop()
                    if job is None:
                        break
                    await self._send(job)
            while self.flights and self._usable(reader):  # stopping: the jobs in flight finish first
                await slot.wait(self._room_future())
        finally:
            watchdog.cancel()
            if not self.worker.alive:  # let the reader see the end of the pipe and fail the jobs in flight
                with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                    await asyncio.wait_for(asyncio.shield(reader), 10.0)
            reader.cancel()
            if not self.worker.alive:
                self._lost(self.error or self.worker.death_message("while running requests"))
        return self.error

    def _usable(self, reader: asyncio.Task[None]) -> bool:
        return self.worker.alive and not reader.done() and self.error is None

    async def _send(self, job: Job) -> None:
        job_id = next(self._ids)
        header, payloads = encode_batch(job_id, job.kind, [job.request])
        header["type"] = "submit" if job.kind == PREDICT else "batch"
        self.flights[job_id] = _Flight(job)
        job.future.add_done_callback(lambda fut: self._left(job_id, fut))
        self.on_send(job)
        try:
            await self.worker.send(header, payloads)
        except WorkerError as e:
            self._lost(str(e))

    def _left(self, job_id: int, fut: asyncio.Future[Any]) -> None:
        """The caller gave up before the first chunk (its future was cancelled): cancel the job in the worker."""
        flight = self.flights.get(job_id)
        if fut.cancelled() and flight is not None and flight.stream is None:
            self._cancel(job_id)

    def _cancel(self, job_id: int) -> None:
        if self.flights.pop(job_id, None) is not None:
            self._wake_room()
            self.worker.post({"type": "cancel", "id": job_id})

    async def _read(self) -> None:
        try:
            while True:
                header, bodies = await self.worker.receive(None)
                self._route(header, bodies)
        except WorkerError as e:
            self._lost(str(e))

    def _route(self, header: dict[str, Any], bodies: list[bytes]) -> None:
        job_id, kind, responses = header.get("id"), header.get("type"), header.get("responses")
        if isinstance(header.get("metrics"), list) and header["metrics"]:
            self.on_metrics(header["metrics"])
        if kind == "metrics":
            return
        if kind not in ("chunk", "result") or (kind == "chunk" and not responses):
            self.worker.kill()
            raise WorkerError(f"Worker {self.worker.id} sent a reply that answers no job: type {kind!r}, id "
                              f"{job_id!r}; the worker was stopped")  # fmt: skip
        flight = self.flights.get(job_id) if isinstance(job_id, int) else None
        if flight is None or not isinstance(job_id, int):  # cancelled, or past its deadline: nobody waits for it
            return
        flight.last = time.monotonic()
        if kind == "chunk":
            response = _response(header["responses"][0], bodies)
            if flight.stream is None:
                flight.stream = asyncio.Queue()
                flight.job.succeed(InferenceResponse(response.status, b"", response.content_type, response.headers,
                                                     self._chunks(job_id, flight)))  # fmt: skip
            flight.stream.put_nowait(response.body)
            return
        self._finish(job_id, flight, header, bodies)

    def _finish(self, job_id: int, flight: _Flight, header: dict[str, Any], bodies: list[bytes]) -> None:
        self.flights.pop(job_id, None)
        flight.finished = True
        self._wake_room()
        error, responses = header.get("error"), header.get("responses")
        if error is not None:
            self._end(flight, PredictionException(str(error.get("message")), int(error.get("code", 500))))
        elif responses and flight.stream is None:
            flight.job.succeed(_response(responses[0], bodies))
        elif responses:
            flight.stream.put_nowait(_response(responses[0], bodies).body)  # type: ignore[union-attr]
            flight.stream.put_nowait(_END)  # type: ignore[union-attr]
        else:
            self._end(flight, None)

    def _end(self, flight: _Flight, error: BaseException | None) -> None:
        """End the flight's stream (or fail / answer its job, when nothing was streamed) with `error` or cleanly."""
        flight.finished = True
        if flight.stream is not None:
            flight.stream.put_nowait(_END if error is None else error)
        elif error is not None:
            flight.job.fail(error)
        else:  # the handler ended the request without emitting anything
            flight.job.succeed(InferenceResponse(200, b"", "application/json"))

    async def _chunks(self, job_id: int, flight: _Flight) -> AsyncIterator[bytes]:
        assert flight.stream is not None
        try:
            while True:
                item = await flight.stream.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if not flight.finished:  # the frontend stopped reading: the client went away
                self._cancel(job_id)

    async def _watch(self) -> None:
        """Cancel the jobs the worker has said nothing about for response_timeout s."""
        while True:
            await asyncio.sleep(min(1.0, self.response_timeout / 4))
            now = time.monotonic()
            for job_id, flight in list(self.flights.items()):
                if now - flight.last > self.response_timeout:
                    self._cancel(job_id)
                    self._end(flight, RequestTimeout(
                        f"Model {self.worker.spec.model_name}: no message for this request within response_timeout="
                        f"{self.response_timeout:g}s; it was cancelled. Raise responseTimeout in the model-config "
                        "for a model that may be silent that long"))  # fmt: skip

    def _lost(self, error: str) -> None:
        """The worker is gone: every job in flight fails with its error."""
        self.error = self.error or error
        flights, self.flights = list(self.flights.values()), {}
        for flight in flights:
            self._end(flight, WorkerError(self.error))
        self._wake_room()

    def _room_future(self) -> asyncio.Future[None]:
        self._room = asyncio.get_running_loop().create_future()
        return self._room

    def _wake_room(self) -> None:
        if self._room is not None and not self._room.done():
            self._room.set_result(None)


def _response(desc: dict[str, Any], bodies: list[bytes]) -> InferenceResponse:
    return InferenceResponse(int(desc["status"]), bodies[desc["body"]], desc["content_type"], dict(desc["headers"]))
