"""What a prediction costs the event loop, counted rather than timed (a count does not depend on the machine's load).

The server process's CPU per prediction bounds REST throughput (bench/RESULTS.md, "Server under load"). These tests
pin what the prediction path was made to avoid: Starlette's Request and Response objects, a request id read from
the kernel, and more Python calls than the path needs. A new layer on the path shows up here first.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response

from serve.frontends import DataPlane
from serve.frontends.http import TokenAuth, create_inference_app
from serve.metrics import ServerMetrics
from tests.unit.frontends.fakes import FakeRegistry, settings

# Python calls from the ASGI call to the answer for one prediction, the fake registry's 3 and this file's
# receive/send included: 97 through Starlette's Request and Response, 46 without them, 31 with the request metrics
# tallied (serve/metrics/request_tallies.py).
CALL_BUDGET = 40
BODY = b"[1.0, 2.0]"


def _scope(headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": "/predictions/mnist", "raw_path": b"/predictions/mnist", "query_string": b"", "root_path": "",
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2), "state": {},
            "headers": headers or [(b"host", b"x"), (b"content-length", b"%d" % len(BODY)),
                                   (b"content-type", b"application/json")]}  # fmt: skip


async def _predict(app: Any, headers: list[tuple[bytes, bytes]] | None = None) -> list[dict[str, Any]]:
    messages = [{"type": "http.request", "body": BODY, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(_scope(headers), receive, send)
    return sent


def _app(tmp_path: Any) -> Any:
    config = settings(tmp_path)
    return create_inference_app(DataPlane(FakeRegistry(), ServerMetrics(hostname="h"), config), config,
                                TokenAuth.from_settings(config))  # fmt: skip


def test_a_prediction_stays_within_its_call_budget(tmp_path):
    app = _app(tmp_path)
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        calls += event == "call"

    async def main() -> list[dict[str, Any]]:
        await _predict(app)  # first use: metric children, imports
        sys.setprofile(count)
        try:
            return await _predict(app)
        finally:
            sys.setprofile(None)

    sent = asyncio.run(main())
    assert sent[0]["status"] == 200
    assert calls <= CALL_BUDGET, f"a prediction took {calls} Python calls (budget {CALL_BUDGET})"


def test_a_prediction_builds_no_starlette_request_or_response(tmp_path, monkeypatch):
    built: list[str] = []
    for cls in (Request, Response):
        init = cls.__init__

        def spy(self: Any, *args: Any, _init: Any = init, **kwargs: Any) -> None:
            built.append(type(self).__name__)
            _init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", spy)
    sent = asyncio.run(_predict(_app(tmp_path)))
    assert sent[0]["status"] == 200 and built == []


@pytest.mark.parametrize(("accept", "coding"), [(None, None), (b"gzip, deflate", b"gzip"), (b"deflate", b"deflate")])
def test_a_prediction_answers_the_headers_of_the_starlette_path(tmp_path, accept, coding):
    headers = [(b"host", b"x"), (b"content-length", b"%d" % len(BODY)), (b"content-type", b"application/json")]
    sent = asyncio.run(_predict(_app(tmp_path), headers + ([(b"accept-encoding", accept)] if accept else [])))
    start, body = sent
    names = [name for name, _ in start["headers"]]
    values = dict(start["headers"])
    expected = [b"content-length", b"content-type"] + ([b"content-encoding", b"vary"] if coding else [])
    assert names == [*expected, b"x-request-id", b"pragma", b"cache-control", b"expires"]
    assert values[b"content-length"] == b"%d" % len(body["body"]) and values[b"content-type"] == b"application/json"
    assert values.get(b"content-encoding") == coding
