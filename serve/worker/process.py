"""The worker process: `python -m serve.worker.process --model-dir DIR ...`, one model version's handler.

It loads the model directory with `load_from_archive`, optimizes and warms the handler's model up (optimizing.py:
never a reason to fail the load), answers the server's handshake (`ready` with the optimizer's report, or `load_error`
with the handler's exception type, message and last traceback frames), then runs the batches the server sends
(protocol.py) until its input closes. One worker, one process: a handler that crashes, leaks or calls `os._exit`
takes down only this process, and the server restarts it.

The protocol runs on duplicates of the process's original stdin/stdout. Before the handler is imported, fd 0 is
pointed at /dev/null and fd 1 at stderr, so whatever a handler prints (from Python or from C) goes to the log and
can never corrupt the channel. A thread beats on the heartbeat pipe the server passes (`--heartbeat-fd`), during
batches too, so the server can tell a hung process from a long batch (heartbeat.py).

Results are serialised as TorchServe's backend does: bytes as they are, str as UTF-8, a Tensor as `serve.save`
bytes (TorchServe: `torch.save`), anything else as `json.dumps(value, indent=2)`. Unlike TorchServe, a response
carries a content type even when the handler sets none (octet-stream, text/plain or JSON by the value's kind), and
a result that cannot be serialised or is over `max_response_size` fails only its own request (503 / 507), not the
batch. A KServe v1/v2 request's answer is an intermediate the frontend re-encodes (and counts as it sends it): it is
written as compact JSON and may be protocol.REENCODED_TEXT_RATIO times max_response_size. A request whose input
cannot be decoded (JSON nested too deeply, an integer over the digit limit) is answered 400 on its own and never
reaches the handler, which runs the rest of the batch. JSON results are standard JSON: NaN and Infinity are
written as null. A handler whose `handle` returns an iterator streams: each item it yields is a list with one chunk
per request. So does one that calls TorchServe's `send_intermediate_predict_response` (context.py's sink) during
`handle`: each call is a chunk (null for the batch's requests it does not name), and the list `handle` returns is
the last chunk. A handler with `continuous = True` is not run in batches at all (continuous.py).

GPUs (gpu.py): a worker given `--gpu N` makes cuda:N current before the handler loads (or warns and runs on the
CPU when CUDA is not usable). A batch that runs out of memory answers 507 with a message naming the device and
the batch size, the worker frees its cached memory and serves the next batch; a CUDA error that leaves the
context unusable answers 500 and ends the worker (exit code 3), which the server restarts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO

from serve.archive import open_archive
from serve.batching.envelopes import PROTOCOL_HEADER
from serve.batching.job import DESCRIBE, InferenceRequest
from serve.batching.json_values import DECODE_ERRORS, decode_error_text
from serve.errors import ArchiveError, CheckpointError, InvalidInput
from serve.nn.state_dict import StateDictMismatchError
from serve.worker import gpu, heartbeat
from serve.worker.answers import batch_error, error_body, serialize
from serve.worker.context import Context, handler_headers
from serve.worker.continuous import ContinuousRunner, check_continuous, is_continuous
from serve.worker.handler_loader import Handler, load_from_archive
from serve.worker.metrics_cache import declared_metrics_cache
from serve.worker.optimizing import optimize_handler
from serve.worker.protocol import (
    REENCODED_PROTOCOLS,
    REENCODED_TEXT_RATIO,
    decode_batch,
    read_message_sync,
    write_message_sync,
)
from serve.worker.torch_compat import install_torch_compat, torch_compat_enabled

log = logging.getLogger("serve.worker")
TRACEBACK_FRAMES = 4
EXIT_CONTEXT_LOST = 3  # a CUDA error left the context unusable: the server starts a fresh worker


class BatchFailed(Exception):
    """The whole batch answers with this status and message."""

    def __init__(self, code: int, message: str, error_type: str = "InternalServerException") -> None:
        super().__init__(message)
        self.code, self.message, self.error_type = code, message, error_type


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    # started with `python -P` (worker_process.py), so serve came from its own root, never from a `serve` folder
    # among the model's files; now the model directory goes first, as the working directory of `-m` used to
    sys.path.insert(0, args.model_dir)
    channel_in, channel_out = _take_channel()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    if args.heartbeat_fd is not None:
        heartbeat.start(args.heartbeat_fd, args.heartbeat_interval)
    try:
        handler, context, device, optimization = _load(args)
    except (Exception, SystemExit) as e:
        write_message_sync(channel_out, load_error(e))
        return 1
    continuous = is_continuous(handler)
    loaded = [r.to_dict() for r in context.metrics.drain()]  # what initialize recorded (InitializeCallCount)
    ready = {"type": "ready", "pid": os.getpid(), "optimization": optimization, "continuous": continuous,
             "metrics": loaded}  # fmt: skip
    write_message_sync(channel_out, ready)
    lock = threading.Lock()  # one writer on the channel: a continuous handler emits from its own threads
    runner = BatchRunner(handler, context, channel_out, args.max_response_size, device, lock)
    streams = ContinuousRunner(handler, context, channel_out, args.max_response_size, lock) if continuous else None
    while (message := read_message_sync(channel_in, args.max_input_bytes)) is not None:
        header, payloads = message
        if header.get("type") == "batch":
            runner.run(header, payloads)
            if runner.context_lost:
                return EXIT_CONTEXT_LOST
        elif streams is not None:
            streams.handle(header, payloads)
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m serve.worker.process", description="serve's model worker process")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--handler", default=None, help="module[:function] overriding the manifest's handler")
    p.add_argument("--gpu", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--limit-max-image-pixels", choices=("true", "false"), default="true")
    p.add_argument("--max-response-size", type=int, default=6553500)
    p.add_argument("--max-input-bytes", type=int, default=1 << 30)
    p.add_argument("--metrics-config", default=None, help="TorchServe's metrics YAML: its model_metrics are made")
    p.add_argument("--heartbeat-fd", type=int, default=None, help="the pipe to beat on (heartbeat.py)")
    p.add_argument("--heartbeat-interval", type=float, default=5.0, help="seconds between beats")
    return p.parse_args(argv)


def _take_channel() -> tuple[BinaryIO, BinaryIO]:
    """The protocol's ends, taken off fds 0 and 1 before any handler code can print to them."""
    sys.stdout.flush()
    channel_in = os.fdopen(os.dup(0), "rb")
    channel_out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    return channel_in, channel_out


def _load(args: argparse.Namespace) -> tuple[Handler, Context, str | None, dict[str, Any]]:
    """The handler, its context, the CUDA device the worker runs on (None: the CPU), and the optimizer's report
    (optimizing.py: the model optimized and warmed up, or why it runs eagerly)."""
    archive = open_archive(args.model_dir)
    if args.handler:
        archive.manifest["model"]["handler"] = args.handler
    started = time.perf_counter()
    device = gpu.use_gpu(args.gpu, archive.model_config)
    if torch_compat_enabled(archive.manifest, archive.model_config, archive.model_dir):
        install_torch_compat()  # for the worker's whole life: initialize and requests may import torch too
    metrics = declared_metrics_cache(archive.model_name, args.metrics_config)
    handler, context = load_from_archive(archive, gpu=args.gpu, batch_size=args.batch_size,
                                         limit_max_image_pixels=args.limit_max_image_pixels == "true",
                                         metrics=metrics)  # fmt: skip
    log.info("model %s loaded in %.2f s on %s (pid %d)", archive.model_name, time.perf_counter() - started,
             device or "the CPU", os.getpid())  # fmt: skip
    check_continuous(handler, archive.model_config)
    optimization = optimize_handler(handler, archive.model_config, args.batch_size, device)
    return handler, context, device, optimization


def load_error(e: BaseException) -> dict[str, Any]:
    """The handshake for a failed load: the exception and where it was raised (the last frames); `invalid_model`
    when a file of the archive was refused (a CheckpointError or ArchiveError) or its checkpoint does not fit its
    model file (a StateDictMismatchError), also as the cause of what the handler raised, whose message then
    follows: the registration's fault, answered 400."""
    frames = traceback.extract_tb(e.__traceback__)[-TRACEBACK_FRAMES:]
    refused = _refused_file(e)
    message = str(e) if refused in (None, e) else f"{e} ({type(refused).__name__}: {refused})"
    return {"type": "load_error", "error_type": type(e).__name__, "message": message,
            "traceback": "".join(traceback.format_list(frames)).rstrip(),
            "invalid_model": refused is not None}  # fmt: skip


def _refused_file(e: BaseException | None) -> BaseException | None:
    """The CheckpointError, ArchiveError or StateDictMismatchError in `e`'s chain of causes, if any."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, (CheckpointError, ArchiveError, StateDictMismatchError)):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


class BatchRunner:
    """Runs batches through the handler and writes their results to the channel."""

    def __init__(self, handler: Handler, context: Context, channel: BinaryIO, max_response_size: int,
                 device: str | None = None, lock: threading.Lock | None = None) -> None:  # fmt: skip
        self.refused: dict[int, dict[str, Any]] = {}  # this batch's requests whose input did not decode (400)
        self.handler, self.context, self.channel = handler, context, channel
        self.max_response_size = max_response_size
        self.reencoded: list[bool] = []  # per request the handler sees: its answer is re-encoded by the frontend
        self.device = device  # "cuda:N" when the handler runs on a GPU
        self.context_lost = False  # a CUDA error made the device unusable: the worker must exit
        self._lock = lock or threading.Lock()  # one writer: send_intermediate_predict_response may come from any thread
        self._sent_intermediate = False

    def run(self, header: dict[str, Any], payloads: list[bytes]) -> None:
        batch_id = header["id"]
        requests = decode_batch(header, payloads)
        inputs, self.refused = _decode_inputs(requests, getattr(self.handler, "kserve_envelopes", False) is True)
        kept = [r for i, r in enumerate(requests) if i not in self.refused]
        self.reencoded = [r.headers.get(PROTOCOL_HEADER) in REENCODED_PROTOCOLS for r in kept]
        self.context.begin_batch({i: r.request_id for i, r in enumerate(kept)},
                                 [handler_headers(r, header.get("kind") == DESCRIBE) for r in kept])  # fmt: skip
        self.context.metrics.clear()
        started = time.perf_counter()
        end: dict[str, Any] = {}
        bodies: list[bytes] = []
        out_of_memory = streamed = self._sent_intermediate = False
        self.context.intermediate_sink = lambda ret, ids, code: self._intermediate(batch_id, ret, ids, code)
        try:
            output = self.handler.handle(inputs, self.context) if kept else []
            if isinstance(output, Iterator) or self._sent_intermediate:  # what handle returned is the last chunk
                streamed = True
                self._stream(batch_id, output if isinstance(output, Iterator) else iter([output]), len(kept))
                end = {"end": True}
            else:
                responses, bodies = self._responses(output, len(kept))
                end = {"responses": responses}
        except BatchFailed as e:
            end = {"error": {"code": e.code, "type": e.error_type, "message": e.message}}
        except Exception as e:  # every handler failure answers the batch; the worker lives on (but see gpu.py)
            end = {"error": batch_error(e, self.device, len(kept))}
            out_of_memory = gpu.is_out_of_memory(e)
            self.context_lost = self.device is not None and gpu.is_fatal(e)
        with self._lock:
            self.context.intermediate_sink = None
            streamed = streamed or self._sent_intermediate
        if "error" in end and self.refused and not streamed:  # the refused requests keep their own 400
            end = {"responses": [_error_response(end["error"], bodies) for _ in kept]}
        if "responses" in end:
            end["responses"] = self._with_refused(end["responses"], bodies, len(requests))
        handler_ms = (time.perf_counter() - started) * 1000
        result = {"type": "result", "id": batch_id, **end, "handler_ms": handler_ms, "metrics": self._metrics()}
        self._write(result, bodies)
        if self.context_lost:
            log.error("the CUDA context of %s is unusable after that error: this worker exits and the server "
                      "starts a new one", self.device)  # fmt: skip
        elif out_of_memory:
            gpu.release_memory(self.device)

    def _write(self, header: dict[str, Any], bodies: list[bytes]) -> None:
        with self._lock:
            write_message_sync(self.channel, header, bodies)

    def _intermediate(self, batch_id: int, ret: list[Any], request_id_map: Mapping[int, str], code: int) -> None:
        """One chunk for the requests of `request_id_map` (`ret[idx]` for each idx; null for the batch's others):
        TorchServe's send_intermediate_predict_response. `code` other than 200 is those requests' status."""
        with self._lock:
            if self.context.intermediate_sink is None:
                raise RuntimeError("send_intermediate_predict_response after the batch was answered")
            position = {rid: i for i, rid in self.context.request_ids.items()}
            bodies: list[bytes] = []
            partial: list[dict[str, Any] | None] = [None] * len(position)
            for idx, request_id in request_id_map.items():
                if request_id not in position:
                    raise ValueError(f"send_intermediate_predict_response: request id {request_id!r} is not in the "
                                     "batch being handled; pass context.request_ids (or a part of it)")  # fmt: skip
                desc = partial[position[request_id]] = self._response(position[request_id], ret[idx], bodies)
                desc["status"] = code if code != 200 else desc["status"]
            responses = self._with_refused(partial, bodies, len(position) + len(self.refused))
            write_message_sync(self.channel, {"type": "chunk", "id": batch_id, "responses": responses}, bodies)
            self.refused = {i: {**e, "message": ""} for i, e in self.refused.items()}  # later chunks: status only
            self._sent_intermediate = True

    def _with_refused(self, responses: list[Any], bodies: list[bytes], n: int) -> list[Any]:
        """`responses` (one per request the handler saw) with each refused request's 400 at its place in the batch."""
        if not self.refused:
            return responses
        kept = iter(responses)
        return [_error_response(self.refused[i], bodies) if i in self.refused else next(kept) for i in range(n)]

    def _stream(self, batch_id: int, output: Iterator[Any], n: int) -> None:
        for item in output:
            responses, bodies = self._responses(item, n)
            responses = self._with_refused(responses, bodies, n + len(self.refused))
            self._write({"type": "chunk", "id": batch_id, "responses": responses}, bodies)
            self.refused = {i: {**e, "message": ""} for i, e in self.refused.items()}  # later chunks: status only

    def _responses(self, output: Any, n: int) -> tuple[list[dict[str, Any]], list[bytes]]:
        if not isinstance(output, (list, tuple)):
            raise BatchFailed(503, f"Invalid model predict output: handle() returned {type(output).__name__}; it "
                                   f"must return a list with one result per request ({n} requests)")  # fmt: skip
        if len(output) != n:
            raise BatchFailed(503, f"number of batch response mismatched: the handler returned {len(output)} results "
                                   f"for {n} requests; handle() must return one result per request")  # fmt: skip
        responses: list[dict[str, Any]] = []
        bodies: list[bytes] = []
        for idx, value in enumerate(output):
            responses.append(self._response(idx, value, bodies))
        return responses, bodies

    def _response(self, idx: int, value: Any, bodies: list[bytes]) -> dict[str, Any]:
        status, _ = self.context.get_response_status(idx)
        headers = dict(self.context.get_response_headers(idx))
        set_type = next((headers.pop(k) for k in list(headers) if k.lower() == "content-type"), None)
        reencoded = idx < len(self.reencoded) and self.reencoded[idx]
        try:
            body, content_type = serialize(value, compact=reencoded)
        except (TypeError, ValueError) as e:
            status, body, content_type = 503, error_body(503, f"Unsupported model output data type: {e}"), None
        limit = self.max_response_size * (REENCODED_TEXT_RATIO if reencoded else 1)
        if len(body) > limit:
            what = f"{REENCODED_TEXT_RATIO} x max_response_size" if reencoded else "max_response_size"
            message = (f"the response of {len(body)} bytes exceeds {what} ({limit} bytes); raise max_response_size "
                       "in config.properties")  # fmt: skip
            status, body, content_type = 507, error_body(507, message), None
        bodies.append(body)
        return {"status": status, "headers": headers, "content_type": set_type or content_type or "application/json",
                "body": len(bodies) - 1}  # fmt: skip

    def _metrics(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.context.metrics.drain()]


def _decode_inputs(requests: list[InferenceRequest],
                   envelopes: bool = False) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:  # fmt: skip
    """The handler inputs of the requests that decode, and an error (400) for each that does not, by batch index:
    one request's hostile body must not fail its batch-mates. `envelopes`: the handler opted in to KServe
    envelopes being opened for it (serve/batching/envelopes.py)."""
    inputs: list[dict[str, Any]] = []
    refused: dict[int, dict[str, Any]] = {}
    for i, request in enumerate(requests):
        try:
            inputs.append(request.handler_inputs(envelopes))
        except (InvalidInput, *DECODE_ERRORS) as e:
            message = str(e) if isinstance(e, InvalidInput) else f"the input cannot be decoded: {decode_error_text(e)}"
            refused[i] = {"code": 400, "type": "BadRequestException", "message": message}
    return inputs, refused


def _error_response(error: dict[str, Any], bodies: list[bytes]) -> dict[str, Any]:
    """A per-request response carrying `error` ({code, type, message}) as TorchServe's error body."""
    bodies.append(json.dumps(error, indent=2).encode() if error["message"] else b"")
    return {"status": error["code"], "headers": {}, "content_type": "application/json", "body": len(bodies) - 1}


if __name__ == "__main__":
    sys.exit(main())
