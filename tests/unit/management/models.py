"""Tiny model directories for the engine tests: a MANIFEST, a handler written here, an optional model-config.

    async def scenario():
        async with running(tmp_path) as registry:     # shut down however the scenario ends
            ...
    run(scenario())                                   # one event loop per test, bounded in time

CONTROL_HANDLER does what each request's body says ("ok", "sleep:0.5", "exit", "raise", "predict_error",
"wrong_count", "teapot"), prints to stdout (which must not corrupt the channel), and appends each batch's size to
`batches.txt` in its model directory (the worker's working directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

from serve.batching import InferenceRequest
from serve.config import Settings
from serve.management import ModelRegistry
from serve.metrics import ServerMetrics

# Bounds for a machine at a load of 10 (worker processes start in seconds there), reached only by a scenario that hangs
STARTUP_S = 120
SCENARIO_S = 300

CONTROL_HANDLER = """
import os, time
from serve.errors import PredictionException

def handle(data, context):
    if data is None:
        print("initialising: this print goes to the log, not the protocol")
        os.write(1, b"and so does a write to fd 1, as C code would do\\n")
        return None
    bodies = [bytes(row.get("body") or b"").decode() for row in data]
    with open("batches.txt", "a") as f:
        f.write(f"{len(data)}\\n")
    print("handling", bodies)
    for b in bodies:
        if b.startswith("sleep:"):
            time.sleep(float(b.split(":")[1]))
    if "exit" in bodies:
        os._exit(3)
    if "raise" in bodies:
        raise ValueError("the handler broke on purpose")
    if "predict_error" in bodies:
        raise PredictionException("custom failure", 599)
    if "wrong_count" in bodies:
        return bodies + ["extra"]
    for idx, b in enumerate(bodies):
        if b == "teapot":
            context.set_response_status(418, "I'm a teapot", idx)
            context.set_response_header(idx, "x-teapot", "yes")
    return [{"body": b, "batch": len(data), "pid": os.getpid()} for b in bodies]
"""

STREAM_HANDLER = """
def handle(data, context):
    if data is None:
        return None
    def parts():
        for i in range(3):
            yield [f"part{i};" for _ in data]
    return parts()
"""

LOAD_ERROR_HANDLER = """
def handle(data, context):
    if data is None:
        raise FileNotFoundError("weights missing: model.pt is not in the archive")
    return data
"""

DESCRIBE_HANDLER = """
from handlers.base_handler import BaseHandler

class Described(BaseHandler):
    def initialize(self, context):
        self.initialized = True

    def describe_handle(self):
        return {"labels": ["cat", "dog"]}

    def handle(self, data, context):
        return super().handle(data, context) if context.get_request_header(0, "describe") == "True" else data
"""


def model_dir(root: Path, name: str, handler: str, version: str = "1.0", config: str | None = None) -> Path:
    """A model directory `root/<name>-<version>` with MAR-INF/MANIFEST.json, handler.py and maybe config.yaml."""
    path = root / f"{name}-{version}"
    (path / "MAR-INF").mkdir(parents=True)
    (path / "handler.py").write_text(handler)
    model: dict[str, Any] = {"modelName": name, "handler": "handler.py", "modelVersion": version}
    if config is not None:
        (path / "config.yaml").write_text(config)
        model["configFile"] = "config.yaml"
    (path / "MAR-INF" / "MANIFEST.json").write_text(json.dumps({"runtime": "python", "model": model}))
    return path


def settings(store: Path, **overrides: Any) -> Settings:
    """Settings for a test: the model store, no snapshots, a short drain; a worker may take as long to load as a
    machine at a load of 10 needs (default_startup_timeout: tests of that timeout set their own)."""
    base = Settings(model_store=store, ncs=True, unregister_model_timeout=10, default_startup_timeout=STARTUP_S)
    return dataclasses.replace(base, **overrides)


def request(body: str | bytes, rid: str = "r") -> InferenceRequest:
    return InferenceRequest(rid, {"body": body.encode() if isinstance(body, str) else body})


def batch_sizes(path: Path) -> list[int]:
    file = path / "batches.txt"
    return [int(x) for x in file.read_text().split()] if file.exists() else []


@contextlib.asynccontextmanager
async def running(store: Path, **overrides: Any) -> AsyncIterator[ModelRegistry]:
    """A registry on `settings(store, **overrides)`, started (its startup models loaded), shut down (workers
    stopped) however the test ends."""
    registry = ModelRegistry(settings(store, **overrides), ServerMetrics())
    try:
        await registry.start()
        yield registry
    finally:
        await registry.shutdown(10)


def run(coro: Coroutine[Any, Any, Any], timeout: float = SCENARIO_S) -> Any:
    """Run one scenario on a fresh event loop, failing it after `timeout` s instead of hanging."""
    return asyncio.run(asyncio.wait_for(coro, timeout))
