"""A bad request fails only itself in a real batch of the tensor handler (issue 24 item 6).

The model is a small convolution (3 -> 4 channels, 3x3) averaged and fed to a 4 -> 2 linear layer, served by the
built-in `tensor` handler with `batchSize: 8` and the handler's `dtype: float32`, as the resnet18 example is. Each
round forms a batch of exactly eight: a "hold" request (a good one whose first value is 7777, which the model holds
until a release file exists) keeps the one worker busy while eight requests are sent one by one, each waiting until
`ts_queue_depth` counts it, so their order in the queue is known; then the hold is released and the eight run as
one batch. One of the eight is bad: a (2, 3, 8, 8) `.npy` (a batch sent as one request) or the JSON `[[[1,2,3]]]`,
at position 0, 3 or 7. Expected, every round: 400 for the bad one naming the shape the model answers, 200 with the
model's answer (numpy's convolution on the same weights) for the hold and each of the seven good ones, and the
model run once on the seven together (its log of batch sizes).
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import serve
from serve import nn
from serve.archive import package
from tests.integration.server import ServerProcess

TIMEOUT = 90
HOLD_VALUE = 7777.0
MODEL = """
import os
import time

from serve import nn

LOG = {log!r}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        with open(LOG, "a") as f:
            f.write(f"{{x.shape[0]}}\\n")
        if x.ndim == 4 and float(x[0, 0, 0, 0].item()) == {hold}:  # the hold request: wait for the release file
            open(LOG + ".held", "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(LOG + ".release") and time.monotonic() < deadline:
                time.sleep(0.01)
        return self.fc(self.conv(x).mean((2, 3)))  # (B, 3, H, W) -> (B, 4, H-2, W-2) -> (B, 4) -> (B, 2)
"""
CONFIG = """minWorkers: 1
maxWorkers: 1
batchSize: 8
maxBatchDelay: 5000
optimize: false
handler:
  dtype: float32
"""


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4, 2)


def reference(weights: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The model on one (3, H, W) input, by numpy: convolution, mean over the image, linear layer."""
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (3, 3), axis=(1, 2))  # (3, H-2, W-2, 3, 3)
    conv = np.einsum("cijkl,ockl->oij", windows, weights["conv.weight"]) + weights["conv.bias"][:, None, None]
    return weights["fc.weight"] @ conv.mean((1, 2)) + weights["fc.bias"]  # (2,)


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    base = tmp_path_factory.mktemp("mixed_batches")
    src, store = base / "src", base / "store"
    src.mkdir()
    store.mkdir()
    log = base / "forward.log"
    (src / "model.py").write_text(MODEL.format(log=str(log), hold=HOLD_VALUE))
    (src / "model-config.yaml").write_text(CONFIG)
    serve.manual_seed(0)
    state = _Net().state_dict()
    serve.save(state, src / "net.pt")
    package("net", "1.0", "tensor", model_file=src / "model.py", serialized_file=src / "net.pt",
            config_file=src / "model-config.yaml", export_path=store, progress=False)  # fmt: skip
    weights = {k: v.numpy().astype(np.float64) for k, v in state.items()}
    server = ServerProcess(base / "run", store, "--ncs", "--disable-token-auth", "--models", "net=net.mar").start()
    try:
        yield {"server": server, "log": log, "weights": weights}
    finally:
        server.stop()


def _predict(server: ServerProcess, body: bytes, content_type: str) -> httpx.Response:
    return httpx.post(f"{server.inference}/predictions/net", content=body, headers={"Content-Type": content_type},
                      timeout=TIMEOUT)  # fmt: skip


def _queue_depth(server: ServerProcess) -> int:
    for line in httpx.get(server.metrics + "/metrics", timeout=TIMEOUT).text.splitlines():
        if line.startswith("ts_queue_depth{") and 'model_name="net"' in line:
            return int(float(line.split()[-1]))
    return 0


def _wait_for(condition: Callable[[], bool], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.02)


def _forward_sizes(log: Path) -> list[int]:
    return [int(line) for line in log.read_text().split()] if log.exists() else []


BAD = {
    "npy_batch": (npy(np.ones((2, 3, 8, 8), np.float32)), "application/octet-stream", "(2, 3, 8, 8) float32"),
    "json_one_channel": (b"[[[1, 2, 3]]]", "application/json", "(1, 1, 3) float32"),
}


@pytest.mark.parametrize(("bad", "position"), [("npy_batch", 0), ("json_one_channel", 3), ("npy_batch", 7),
                                               ("json_one_channel", 0)])  # fmt: skip
def test_a_bad_request_in_a_batch_of_eight_fails_alone(world: dict, bad: str, position: int) -> None:
    server, log, weights = world["server"], world["log"], world["weights"]
    held, release = Path(str(log) + ".held"), Path(str(log) + ".release")
    held.unlink(missing_ok=True)
    release.unlink(missing_ok=True)
    rng = np.random.default_rng(position)
    hold = rng.standard_normal((3, 8, 8)).astype(np.float32)
    hold[0, 0, 0] = HOLD_VALUE
    goods = list(rng.standard_normal((7, 3, 8, 8)).astype(np.float32))
    bodies: list[tuple[bytes, str]] = [(npy(g), "application/octet-stream") for g in goods[:4]]
    bodies += [(json.dumps(g.tolist()).encode(), "application/json") for g in goods[4:]]  # JSON ones too
    bad_body, bad_type, bad_shape = BAD[bad]
    bodies.insert(position, (bad_body, bad_type))
    inputs: list[Any] = [*goods]
    inputs.insert(position, None)
    with ThreadPoolExecutor(len(bodies) + 1) as pool:
        held_answer = pool.submit(_predict, server, npy(hold), "application/octet-stream")
        _wait_for(held.exists, "the hold request to reach the model")
        sizes_before = len(_forward_sizes(log))
        answers = []
        for i, (body, content_type) in enumerate(bodies):
            answers.append(pool.submit(_predict, server, body, content_type))
            _wait_for(lambda n=i + 1: _queue_depth(server) == n, f"request {i} to queue")  # its place is known
        release.touch()
        assert held_answer.result().status_code == 200
        np.testing.assert_allclose(held_answer.result().json(), reference(weights, hold), rtol=1e-4, atol=1e-4)
        results = [a.result() for a in answers]
    for i, (result, x) in enumerate(zip(results, inputs)):
        if x is None:
            assert result.status_code == 400, result.text
            message = result.json()["message"]
            assert f"input of shape {bad_shape}" in message, message
            assert "it answers inputs of shape (3, 8, 8) float32" in message, message
        else:
            assert result.status_code == 200, (i, result.text)
            np.testing.assert_allclose(result.json(), reference(weights, x), rtol=1e-4, atol=1e-4)
    assert sorted(_forward_sizes(log)[sizes_before:]) == [1, 7]  # one batch of eight, run as 7 good + 1 bad
