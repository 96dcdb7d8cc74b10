"""Running one batch on one worker process and answering every job of it, whatever happens.

    reply = await run_batch(worker, jobs, batch_id, response_timeout)   # a str: the worker is lost, restart it

Outcomes, per job:
- the handler answered: an InferenceResponse with the status, headers and content type it set for that request;
- the handler failed the batch (an exception, the wrong number of results): PredictionException(message, code)
  for every job (code: PredictionException's, 507 for MemoryError, 503 for a wrong count, else 500);
- no reply within `response_timeout` s: RequestTimeout for every job, and the worker is killed (TorchServe answers
  500 "Worker died."; a timeout is told apart here so clients can see a slow model from a crashed one);
- the worker died or garbled the channel: WorkerError ("Worker died. ..." with the exit status and its last output).
A job whose caller went away is skipped. A streamed answer (chunk messages) resolves the job at the first chunk
with an InferenceResponse whose `chunks` yields the body; an error after that ends the stream with the error. The
timeout applies to each message, so a stream may run longer than `response_timeout` as long as it makes progress.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from serve.batching.job import InferenceResponse, Job
from serve.errors import PredictionException, RequestTimeout, WorkerError
from serve.management.worker_process import WorkerProcess
from serve.worker.protocol import encode_batch

_END = object()


async def run_batch(worker: WorkerProcess, jobs: list[Job], batch_id: int,
                    response_timeout: float) -> dict[str, Any] | str:  # fmt: skip
    """Send `jobs` to `worker` and answer each; the final reply's header, or the error text when the worker is
    lost (it was killed, or it died)."""
    streams: dict[int, asyncio.Queue[Any]] = {}
    header, payloads = encode_batch(batch_id, jobs[0].kind, [j.request for j in jobs])
    try:
        await worker.send(header, payloads)
        while True:
            reply, bodies = await worker.receive(response_timeout)
            _check_reply(reply, batch_id, len(jobs), worker)
            if reply["type"] == "chunk":
                _route_chunk(jobs, reply["responses"], bodies, streams)
                continue
            _finish(jobs, reply, bodies, streams)
            return reply
    except TimeoutError:
        worker.kill("response_timeout")
        message = (f"Model {worker.spec.model_name} version {worker.spec.version}: no response within "
                   f"response_timeout={response_timeout:g}s; worker {worker.id} was stopped and is restarting. "
                   "Raise responseTimeout in the model-config (or response_timeout) for a slow model")  # fmt: skip
        _fail(jobs, streams, lambda: RequestTimeout(message))
        return message
    except WorkerError as e:
        worker.kill()
        text = str(e)
        _fail(jobs, streams, lambda: WorkerError(text))
        return text


def _check_reply(reply: dict[str, Any], batch_id: int, n: int, worker: WorkerProcess) -> None:
    kind, responses = reply.get("type"), reply.get("responses")
    wrong = (
        kind not in ("chunk", "result")
        or reply.get("id") != batch_id
        or (responses is not None and len(responses) != n)
        or (kind == "chunk" and responses is None)
        or (kind == "result" and responses is None and "error" not in reply and not reply.get("end"))
    )
    if wrong:
        raise WorkerError(f"Worker {worker.id} sent a reply that does not answer batch {batch_id} of {n} requests: "
                          f"type {kind!r}, id {reply.get('id')!r}; the worker was stopped")  # fmt: skip


def _response(desc: dict[str, Any], bodies: list[bytes]) -> InferenceResponse:
    return InferenceResponse(int(desc["status"]), bodies[desc["body"]], desc["content_type"], dict(desc["headers"]))


def _route_chunk(jobs: list[Job], responses: list[dict[str, Any]], bodies: list[bytes],
                 streams: dict[int, asyncio.Queue[Any]]) -> None:  # fmt: skip
    for i, (job, desc) in enumerate(zip(jobs, responses)):
        if desc is None:  # send_intermediate_predict_response named only some requests of the batch
            continue
        response = _response(desc, bodies)
        if i not in streams:
            streams[i] = asyncio.Queue()
            job.succeed(InferenceResponse(response.status, b"", response.content_type, response.headers,
                                          _chunks(streams[i])))  # fmt: skip
        streams[i].put_nowait(response.body)


def _finish(jobs: list[Job], reply: dict[str, Any], bodies: list[bytes],
            streams: dict[int, asyncio.Queue[Any]]) -> None:  # fmt: skip
    error = reply.get("error")
    if error is not None:
        _fail(jobs, streams, lambda: PredictionException(str(error.get("message")), int(error.get("code", 500))))
        return
    if reply.get("end"):
        for i, job in enumerate(jobs):
            if i in streams:
                streams[i].put_nowait(_END)
            else:  # the handler's iterator yielded nothing
                job.succeed(InferenceResponse(200, b"", "application/json"))
        return
    for job, desc in zip(jobs, reply["responses"]):
        job.succeed(_response(desc, bodies))


def _fail(jobs: list[Job], streams: dict[int, asyncio.Queue[Any]], make_error: Any) -> None:
    for i, job in enumerate(jobs):
        if i in streams:
            streams[i].put_nowait(make_error())
        else:
            job.fail(make_error())


async def _chunks(queue: asyncio.Queue[Any]) -> AsyncIterator[bytes]:
    while True:
        item = await queue.get()
        if item is _END:
            return
        if isinstance(item, BaseException):
            raise item
        yield item
