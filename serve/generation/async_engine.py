"""The engine for callers that do not run its loop: its steps run in one background thread.

    aengine = AsyncLLMEngine(engine)
    async for out in aengine.generate("r1", prompt_token_ids, params):   # closing the iterator aborts r1
        ...
    aengine.add_request("r2", prompt_token_ids, params, callback=emit)   # the same, as callbacks from the thread

Decisions, and why:
- One thread steps the engine while any request is unfinished and ends when none is (a later request starts a new
  one), so an idle model costs nothing and the decoder is only ever called from one thread at a time.
- Outputs reach each request by a callback (what a worker's `emit` is) or, for `generate`, by the caller's event
  loop through `call_soon_threadsafe` into a per-request asyncio.Queue; a slow consumer never blocks the step.
- Leaving `generate` early (aclose, a cancelled task, a break) aborts the request: the engine frees its sequence
  and blocks at the next step. A deadline finishes it with "abort".
- A sequence that failed (its sampling, its text, the model step it was in) comes with its error: `generate`
  raises it, the callback receives it; the other requests go on. A callback that raises (its event loop closed)
  aborts its request: nobody would read the tokens. An exception out of the engine's own step (a bug)
  fails every request then in flight with it, and the thread keeps serving new ones.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable

from serve.generation.engine import LLMEngine
from serve.generation.sampling_params import SamplingParams
from serve.generation.sequence import RequestOutput

__all__ = ["AsyncLLMEngine"]

Callback = Callable[[RequestOutput | BaseException], object]
IDLE_SLEEP = 0.001  # s, when a step had nothing to run (only aborts to process)


class AsyncLLMEngine:
    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._callbacks: dict[str, tuple[Callback, list[int]]] = {}  # request id -> (callback, [sequences left])
        self._thread: threading.Thread | None = None

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                    deadline: float | None = None, *, callback: Callback) -> None:  # fmt: skip
        """Queue a request (ValueError / QueueFull at once, as LLMEngine.add_request); `callback` gets each of
        its RequestOutputs, or the exception that failed it, from the engine's thread."""
        with self._lock:
            if request_id in self._callbacks:
                raise ValueError(f"request id {request_id!r} is already in use")
            self._callbacks[request_id] = (callback, [params.n])
        try:
            self.engine.add_request(request_id, prompt_token_ids, params, deadline)
        except BaseException:
            with self._lock:
                self._callbacks.pop(request_id, None)
            raise
        self._kick()

    def abort(self, request_id: str) -> None:
        """Stop the request: it finishes with "abort" at the next step (its callback is told)."""
        self.engine.abort(request_id)

    async def generate(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                       deadline: float | None = None) -> AsyncIterator[RequestOutput]:  # fmt: skip
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self.add_request(request_id, prompt_token_ids, params, deadline,
                         callback=lambda item: loop.call_soon_threadsafe(queue.put_nowait, item))  # fmt: skip
        left = params.n
        try:
            while left:
                item = await queue.get()
                if isinstance(item, BaseException):
                    left = 0
                    raise item
                if item.finished:
                    left -= 1
                if item.error is not None:
                    raise item.error
                yield item
        finally:
            if left:
                self.abort(request_id)

    def _kick(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="llm-engine", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:  # a request added after this check kicks a new thread
                if not self.engine.has_unfinished():
                    self._thread = None
                    return
            steps = self.engine.counters["steps"]
            try:
                outputs = self.engine.step()
            except Exception as e:  # the engine itself failed: fail what is in flight, keep serving
                self._fail_all(e)
                continue
            for out in outputs:
                self._deliver(out)
            if not outputs and self.engine.counters["steps"] == steps:
                time.sleep(IDLE_SLEEP)

    def _deliver(self, item: RequestOutput) -> None:
        with self._lock:
            entry = self._callbacks.get(item.request_id)
            if entry is None:
                return
            if item.finished:
                entry[1][0] -= 1
                if entry[1][0] == 0 or item.error is not None:
                    del self._callbacks[item.request_id]
        delivered = _call(entry[0], item)
        if item.error is not None or not delivered:  # its other sequences stop with it; nobody reads it any more
            self.engine.abort(item.request_id)

    def _fail_all(self, error: Exception) -> None:
        with self._lock:
            failed, self._callbacks = self._callbacks, {}
        for request_id, (callback, _) in failed.items():
            self.engine.abort(request_id)
            _call(callback, error)


def _call(callback: Callback, item: RequestOutput | BaseException) -> bool:
    """False when the callback raised: its consumer went away (an event loop closed), which must not stop the
    engine."""
    try:
        callback(item)
    except Exception:
        return False
    return True
