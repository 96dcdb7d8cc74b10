"""The worker's continuous mode carries the handler's metrics (serve/worker/continuous.py): records made from any
thread go out with the next chunk/result frame, each once, and an emit dropped after a cancel still sends them."""

from __future__ import annotations

import io
import threading
from typing import Any

from serve.batching.job import PREDICT, InferenceRequest
from serve.worker.context import Context
from serve.worker.continuous import ContinuousRunner
from serve.worker.protocol import encode_batch, read_message_sync


class _Recorder:
    """A continuous handler that keeps each request's emit and records a metric per emit."""

    continuous = True

    def __init__(self, context: Context) -> None:
        self.emits: dict[str, Any] = {}
        self.tokens = context.metrics.add_metric_to_cache("serve:generation_tokens_total", "count", ["model_name"])

    def submit(self, request_id: str, data: dict[str, Any], context: Context, emit: Any) -> None:
        self.emits[request_id] = emit

    def cancel(self, request_id: str) -> None:
        pass


def _frames(channel: io.BytesIO) -> list[dict[str, Any]]:
    channel.seek(0)
    frames = []
    while (message := read_message_sync(channel, 1 << 20)) is not None:
        frames.append(message[0])
    return frames


def _runner() -> tuple[ContinuousRunner, _Recorder, io.BytesIO]:
    context = Context("m", "/tmp", None, 1, None, "test")
    handler = _Recorder(context)
    channel = io.BytesIO()
    runner = ContinuousRunner(handler, context, channel, 1 << 20, threading.Lock())
    for job_id, rid in ((1, "a"), (2, "b")):
        header, payloads = encode_batch(job_id, PREDICT, [InferenceRequest(rid, {"body": b"{}"})])
        header["type"] = "submit"
        runner.handle(header, payloads)
    return runner, handler, channel


def test_records_travel_once_with_the_next_frame_from_any_thread():
    _, handler, channel = _runner()
    thread = threading.Thread(target=lambda: (handler.tokens.add_or_update(3, ["m"]), handler.emits["a"]("x")))
    thread.start()
    thread.join(timeout=30)
    handler.emits["b"]("y", final=True)  # nothing recorded since: no metrics on this frame
    handler.tokens.add_or_update(4, ["m"])
    handler.emits["a"]("z", final=True)
    frames = _frames(channel)
    assert [(f["type"], f["id"]) for f in frames] == [("chunk", 1), ("result", 2), ("chunk", 1), ("result", 1)]
    sent = [[r["value"] for r in f.get("metrics", [])] for f in frames]
    assert sent == [[3], [], [4], []]
    assert frames[0]["metrics"][0]["dimensions"] == [["model_name", "m"]]


def test_a_dropped_emit_sends_its_records_alone():
    runner, handler, channel = _runner()
    runner.cancel(1)
    handler.emits["a"]("late", final=True)  # dropped, and nothing recorded: no frame at all
    handler.tokens.add_or_update(5, ["m"])
    handler.emits["a"]("later", final=True)
    frames = _frames(channel)
    assert frames == [{"type": "metrics", "metrics": [{"name": "serve:generation_tokens_total", "value": 5,
                       "unit": "Count", "metric_type": "counter", "dimensions": [["model_name", "m"]],
                       "request_id": None}]}]  # fmt: skip


def test_the_server_records_metrics_whatever_the_jobs_state():
    """serve/management/continuous.py: a metrics frame, and the metrics of a frame for a job no longer in flight
    (cancelled), are recorded; the frames themselves answer nothing."""
    from serve.management.continuous import ContinuousDispatch

    class _Worker:
        killed = False

        def kill(self) -> None:
            self.killed = True

    recorded: list[list[Any]] = []
    worker = _Worker()
    dispatch = ContinuousDispatch(worker, None, 4, 10.0, on_metrics=recorded.append)  # type: ignore[arg-type]
    record = {"name": "serve:num_requests_running", "value": 0, "unit": "Count", "metric_type": "gauge",
              "dimensions": [["model_name", "m"]], "request_id": None}  # fmt: skip
    dispatch._route({"type": "metrics", "metrics": [record]}, [])
    dispatch._route({"type": "result", "id": 7, "end": True, "metrics": [record, record]}, [])
    dispatch._route({"type": "result", "id": 8, "end": True}, [])
    assert recorded == [[record], [record, record]] and not worker.killed
