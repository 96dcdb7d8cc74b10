"""One workflow request through the DAG: each node's answer feeds its successors, every node runs as a request to
its own registered model, so model nodes go through that model's queue and dynamic batching like any prediction.

    outputs = await run_dag(dag, node_settings, submit, request)     # {leaf node: its answer}

What a node receives (TorchServe's DagExecutor): the start node gets the client's request as it came (its inputs,
content types and headers); a node with one predecessor gets that predecessor's answer as the input `body`; a node
with several gets one input per predecessor, named after it (`data[0]["nmt_en_de"]`). Answers travel as bytes
without a content type, so a handler reads bytes (bytearray when decode_input_request is on) whatever the
predecessor answered, as in TorchServe. Every node sees the client's headers.

Nodes whose predecessors have all answered run at once, concurrently. A node is given `timeout-ms` per attempt
and retried `retry-attempts` times (TorchServe's count: 1 means up to two attempts) when the failure is one a
retry can cure: a timeout, a worker that died, a full queue or no ready worker. A handler's own error or a
refused input is not retried. The first node that fails ends the request: the other nodes' requests are
cancelled (their jobs leave the queues) and the error keeps its kind, so its status (a handler's 400, a 503, a
504 timeout), with a message that names the node. Other requests of the workflow are untouched.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import uuid
from collections.abc import Awaitable, Callable

from serve.batching import InferenceRequest, InferenceResponse
from serve.errors import ModelNotReady, PredictionException, QueueFull, RequestTimeout, ServeError, WorkerError
from serve.workflows.dag import Dag
from serve.workflows.spec import NodeSettings

log = logging.getLogger(__name__)
Submit = Callable[[str, InferenceRequest], Awaitable[InferenceResponse]]  # (node, request) -> the node's answer
RETRIED = (RequestTimeout, WorkerError, QueueFull, ModelNotReady)


async def run_dag(dag: Dag, settings: dict[str, NodeSettings], submit: Submit,
                  request: InferenceRequest) -> dict[str, bytes]:  # fmt: skip
    """The answer of every leaf of `dag` to `request`, in DAG order; the first node error is raised (see module)."""
    inputs: dict[str, dict[str, object]] = {node: {} for node in dag.order}
    waiting = {node: len(before) for node, before in dag.predecessors.items()}
    answers: dict[str, bytes] = {}
    running: dict[asyncio.Task[bytes], str] = {}

    def launch(node: str) -> None:
        start = node == dag.start
        node_request = InferenceRequest(
            _request_id(request, node),
            dict(request.inputs) if start else inputs[node],
            dict(request.content_types) if start else {},
            dict(request.headers),
            decode=request.decode,
        )
        running[asyncio.create_task(_attempts(node, settings[node], submit, node_request))] = node

    launch(dag.start)
    try:
        while running:
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                node = running.pop(task)
                body = task.result()  # the node's error ends the request here
                if not dag.successors[node]:
                    answers[node] = body
                for successor in dag.successors[node]:
                    single = len(dag.predecessors[successor]) == 1
                    inputs[successor]["body" if single else node] = body
                    waiting[successor] -= 1
                    if waiting[successor] == 0:
                        launch(successor)
    finally:
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
    return {leaf: answers[leaf] for leaf in dag.leaves}


def _request_id(request: InferenceRequest, node: str) -> str:
    return f"{request.request_id}-{node}" if request.request_id else str(uuid.uuid4())


async def _attempts(node: str, settings: NodeSettings, submit: Submit, request: InferenceRequest) -> bytes:
    attempt = 0
    while True:
        try:
            return await _once(node, settings, submit, request)
        except RETRIED as e:
            if attempt >= settings.retry_attempts:
                raise _naming(node, e, attempt + 1) from None
            attempt += 1
            log.warning("workflow node %s failed (%s); attempt %d of %d", node, e, attempt + 1,
                        settings.retry_attempts + 1)  # fmt: skip
        except ServeError as e:
            raise _naming(node, e, attempt + 1) from None


async def _once(node: str, settings: NodeSettings, submit: Submit, request: InferenceRequest) -> bytes:
    try:
        response = await asyncio.wait_for(submit(node, request), settings.timeout_ms / 1000)
        body = response.body
        if response.chunks is not None:  # a streaming node: its whole answer feeds the next node
            body = b"".join([chunk async for chunk in response.chunks])
    except TimeoutError:
        raise RequestTimeout(f"no answer within timeout-ms {settings.timeout_ms}") from None
    if response.status >= 400:
        text = body[:200].decode("utf-8", "replace")
        raise PredictionException(f"the handler answered status {response.status}: {text}", response.status)
    return body


def _naming(node: str, error: ServeError, attempts: int) -> ServeError:
    tried = f" after {attempts} attempts" if attempts > 1 else ""
    return with_message(error, f"Workflow node {node} failed{tried}: {error}")


def with_message(error: ServeError, message: str) -> ServeError:
    """A copy of `error` (same kind and `code`, so the same status) carrying `message`."""
    out = copy.copy(error)
    out.args = (message,)
    if isinstance(out, PredictionException):
        out.message = message
    return out
