"""One request through a DAG, against TorchServe's DagExecutor: what each node receives, the leaves' answers,
parallel branches running at once, retries, timeouts, and a node's error failing the request with its kind and
the node's name while the other nodes' requests are cancelled. Nodes are fakes (no workers)."""

from __future__ import annotations

import asyncio

import pytest

from serve.batching import InferenceRequest, InferenceResponse
from serve.errors import InvalidInput, PredictionException, RequestTimeout, WorkerError
from serve.workflows.dag import Dag
from serve.workflows.runner import run_dag
from serve.workflows.spec import NodeSettings, parse_spec

WAIT = 60  # bound on any wait here; never reached unless the runner hangs

PARALLEL = "models:\n  a:\n    url: a.mar\n  b:\n    url: b.mar\ndag:\n  pre: [a, b]\n  a: [agg]\n  b: [agg]\n"


def build(text: str, functions: set[str], **settings: int) -> tuple[Dag, dict[str, NodeSettings]]:
    dag = Dag.build(parse_spec(text), functions)
    return dag, {node: NodeSettings(**settings) for node in dag.order}


def run(dag, settings, submit, request: InferenceRequest):
    return asyncio.run(asyncio.wait_for(run_dag(dag, settings, submit, request), WAIT))


def request(body: bytes = b"x") -> InferenceRequest:
    return InferenceRequest("r1", {"body": body}, {"body": "text/plain"}, {"h": "v"}, decode=True)


def test_each_node_gets_what_torchserve_passes() -> None:
    dag, settings = build(PARALLEL, {"pre", "agg"})
    seen: dict[str, InferenceRequest] = {}

    async def submit(node: str, req: InferenceRequest) -> InferenceResponse:
        seen[node] = req
        return InferenceResponse(body=f"{node}<{','.join(sorted(req.inputs))}>".encode())

    assert run(dag, settings, submit, request(b"in")) == {"agg": b"agg<a,b>"}
    assert seen["pre"].inputs == {"body": b"in"} and seen["pre"].content_types == {"body": "text/plain"}
    assert seen["a"].inputs == {"body": b"pre<body>"} and seen["a"].content_types == {}  # one predecessor: body
    assert seen["agg"].inputs == {"a": b"a<body>", "b": b"b<body>"}  # several: by the predecessors' names
    assert all(r.headers == {"h": "v"} and r.decode for r in seen.values())
    assert len({r.request_id for r in seen.values()}) == 4


def test_several_leaves_and_parallel_branches_run_at_once() -> None:
    dag, settings = build("models: {}\ndag:\n  pre: [x, y]\n", {"pre", "x", "y"})
    started: set[str] = set()

    async def submit(node: str, req: InferenceRequest) -> InferenceResponse:
        started.add(node)
        if node != "pre":  # each branch waits until the other has started: sequential running would hang
            for _ in range(WAIT * 100):
                if {"x", "y"} <= started:
                    break
                await asyncio.sleep(0.01)
            assert {"x", "y"} <= started
        return InferenceResponse(body=node.encode())

    assert run(dag, settings, submit, request()) == {"x": b"x", "y": b"y"}


def test_a_node_error_keeps_its_kind_names_the_node_and_cancels_the_others() -> None:
    dag, settings = build(PARALLEL, {"pre", "agg"}, retry_attempts=3)
    cancelled, calls = [], []

    async def submit(node: str, req: InferenceRequest) -> InferenceResponse:
        calls.append(node)
        if node == "a":
            raise PredictionException("bad pixel", 422)
        if node == "b":
            try:
                await asyncio.sleep(WAIT)
            except asyncio.CancelledError:
                cancelled.append(node)
                raise
        return InferenceResponse(body=b"ok")

    with pytest.raises(PredictionException) as raised:
        run(dag, settings, submit, request())
    assert raised.value.code == 422 and str(raised.value) == "Workflow node a failed: bad pixel"
    assert raised.value.message == str(raised.value)
    assert cancelled == ["b"] and calls.count("a") == 1  # a handler's own error is not retried
    assert "agg" not in calls


def test_worker_failures_are_retried_retry_attempts_times() -> None:
    dag, settings = build("models: {}\ndag:\n  f: []\n", {"f"}, retry_attempts=2)
    failures = [WorkerError("worker died"), RequestTimeout("slow")]

    async def submit(node: str, req: InferenceRequest) -> InferenceResponse:
        if failures:
            raise failures.pop(0)
        return InferenceResponse(body=b"third time")

    assert run(dag, settings, submit, request()) == {"f": b"third time"}
    failures[:] = [WorkerError("1"), WorkerError("2"), WorkerError("3")]
    with pytest.raises(WorkerError, match="Workflow node f failed after 3 attempts: 3"):
        run(dag, settings, submit, request())


def test_timeout_ms_bounds_each_attempt() -> None:
    dag, settings = build("models: {}\ndag:\n  f: []\n", {"f"}, retry_attempts=0, timeout_ms=50)

    async def submit(node: str, req: InferenceRequest) -> InferenceResponse:
        await asyncio.sleep(WAIT)
        return InferenceResponse()

    with pytest.raises(RequestTimeout, match="Workflow node f failed: no answer within timeout-ms 50"):
        run(dag, settings, submit, request())


def test_an_error_status_from_a_node_fails_the_request_with_it() -> None:
    dag, settings = build("models: {}\ndag:\n  f: [g]\n", {"f", "g"})

    async def submit(node: str, req: InferenceRequest) -> InferenceResponse:
        if node == "g":
            raise InvalidInput("g refused it")
        return InferenceResponse(status=418, body=b"teapot")

    with pytest.raises(PredictionException) as raised:
        run(dag, settings, submit, request())
    assert raised.value.code == 418 and "node f failed: the handler answered status 418: teapot" in str(raised.value)


def test_a_streamed_node_answer_feeds_the_next_node_whole() -> None:
    dag, settings = build("models: {}\ndag:\n  f: [g]\n", {"f", "g"})

    async def chunks():
        yield b"he"
        yield b"llo"

    async def submit(node: str, req: InferenceRequest) -> InferenceResponse:
        if node == "f":
            return InferenceResponse(chunks=chunks())
        return InferenceResponse(body=bytes(req.inputs["body"]).upper())

    assert run(dag, settings, submit, request()) == {"g": b"HELLO"}
