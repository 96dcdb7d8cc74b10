"""`ts.handler_utils.micro_batching.MicroBatching`: TorchServe's micro-batching, run as TorchServe runs it.

A handler sets `self.handle = MicroBatching(self)` in `__init__`; the worker then calls it as `handle(data,
context)`. The batch is cut into micro-batches of `micro_batch_size` requests that flow through three stages,
preprocess -> inference -> postprocess, each served by its own pool of plain Python threads (`parallelism`, e.g.
{"preprocess": 2, "inference": 1, "postprocess": 2}; 1 each by default) joined by queues, so one micro-batch's
preprocessing overlaps another's inference. The results come back in request order. Describe and explain
requests run the handler's own methods, and `HandlerTime` is recorded, as in TorchServe.

Where we differ from TorchServe, on purpose: an exception in a stage is carried to the end of the pipeline and
raised by `handle` (the batch fails with that error) instead of leaving `handle` waiting forever; a bad
`parallelism` key or count is a ValueError, not an assert. Requests are not answered one by one on a bad input
here (each micro-batch's preprocess sees only its own requests): a bad request fails the batch, as in TorchServe.
The stage threads are daemon threads, stopped by `shutdown()` (also on garbage collection).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import Any

HANDLER_METHODS = ["preprocess", "inference", "postprocess"]
POLL_S = 0.5  # how often an idle stage thread checks whether it should stop


@dataclasses.dataclass
class WorkerThread:
    event: threading.Event
    thread: threading.Thread


@dataclasses.dataclass
class _Failed:
    """A stage's exception, passed down the pipeline in place of the micro-batch's data."""

    error: BaseException


class MicroBatching:
    def __init__(self, parent_handler: Any, micro_batch_size: int = 1, parallelism: dict[str, int] | None = None):
        self.handler = parent_handler
        self.micro_batch_size = micro_batch_size
        self._parallelism: dict[str, int] = {}
        self.thread_groups: dict[str, list[WorkerThread]] = {m: [] for m in HANDLER_METHODS}
        self.queues: dict[str, queue.Queue[Any]] = {}
        self._lock = threading.Lock()  # one batch at a time through the shared queues
        self._create_queues()
        self.parallelism = parallelism or {}

    def __del__(self) -> None:
        self.shutdown()

    @property
    def parallelism(self) -> dict[str, int]:
        return dict(self._parallelism)

    @parallelism.setter
    def parallelism(self, parallelism: dict[str, int]) -> None:
        """Threads per stage; stages not named keep their count (1 at first)."""
        for key, count in parallelism.items():
            if key not in HANDLER_METHODS:
                raise ValueError(f"micro-batching parallelism: {key!r} is not one of the stages {HANDLER_METHODS}")
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"micro-batching parallelism.{key} must be a positive integer, got {count!r}")
        self._parallelism.update(parallelism)
        self._update_threads()

    def shutdown(self) -> None:
        """Stops every stage thread (each notices within POLL_S seconds)."""
        for group in getattr(self, "thread_groups", {}).values():
            for worker in group:
                worker.event.set()
            for worker in group:
                worker.thread.join()
            group.clear()

    def _create_queues(self) -> None:
        # each stage's "out" queue is the next stage's "in" queue
        previous: queue.Queue[Any] = queue.Queue()
        for method in HANDLER_METHODS:
            self.queues[method + "_in"] = previous
            previous = queue.Queue()
            self.queues[method + "_out"] = previous

    def _update_threads(self) -> None:
        for method in HANDLER_METHODS:
            target, group = self._parallelism.get(method, 1), self.thread_groups[method]
            while len(group) < target:
                event = threading.Event()
                args = (self.queues[method + "_in"], self.queues[method + "_out"], method, event)
                thread = threading.Thread(target=self.execute_call, args=args, daemon=True,
                                          name=f"micro-batching-{method}-{len(group)}")  # fmt: skip
                thread.start()
                group.append(WorkerThread(event, thread))
            while len(group) > target:
                worker = group.pop()
                worker.event.set()
                worker.thread.join()

    def execute_call(self, in_queue: queue.Queue[Any], out_queue: queue.Queue[Any], method: str,
                     event: threading.Event) -> None:  # fmt: skip
        """A stage thread: take a micro-batch, run the handler's method on it, pass the result on."""
        while not event.is_set():
            try:
                idx, in_data = in_queue.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if isinstance(in_data, _Failed):
                out_queue.put((idx, in_data))
                continue
            try:
                out_data = getattr(self.handler, method)(in_data)
            except Exception as e:  # carried to handle(), which raises it
                out_data = _Failed(e)
            out_queue.put((idx, out_data))

    def handle(self, data: list[Any]) -> list[Any]:
        """The batch through the pipeline in micro-batches; the results in request order."""
        with self._lock:
            starts = range(0, len(data), self.micro_batch_size)
            for idx, start in enumerate(starts):
                self.queues[HANDLER_METHODS[0] + "_in"].put_nowait((idx, data[start : start + self.micro_batch_size]))
            done = [self.queues[HANDLER_METHODS[-1] + "_out"].get() for _ in starts]
        failed = [out for _, out in done if isinstance(out, _Failed)]
        if failed:
            raise failed[0].error
        return [item for _, batch in sorted(done, key=lambda pair: pair[0]) for item in batch]

    def __call__(self, data: list[Any], context: Any) -> list[Any]:
        """The handler's `handle(data, context)`: describe, explain, or the micro-batched pipeline; HandlerTime."""
        start = time.perf_counter()
        self.handler.context = context
        if self.handler._is_describe():
            output = [self.handler.describe_handle()]
        elif self.handler._is_explain():
            output = self.handler.explain_handle(self.handler.preprocess(data), data)
        else:
            output = self.handle(data)
        context.metrics.add_time("HandlerTime", round((time.perf_counter() - start) * 1000, 2), None, "ms")
        return output
