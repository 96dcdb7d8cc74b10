"""Optimized inference in the real server: on by default, warmed up before the worker is ready, shown by describe,
`optimize: false` to opt out, a wrong model-config value refused, and the same answers either way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

import serve
from serve.archive import package
from tests.integration.server import LIN_CONFIG, LIN_MODEL, ServerProcess, _Lin

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits"


def _digits(store: Path, name: str, extra_config: str = "") -> None:
    config = store.parent / f"{name}-config.yaml"
    config.write_text((DIGITS / "model-config.yaml").read_text() + extra_config)
    package(name, "1.0", "image_classifier", model_file=DIGITS / "model.py",
            serialized_file=DIGITS / "digits_lenet.pt", extra_files=[DIGITS / "index_to_name.json"],
            config_file=config, export_path=store, torch_compat=True, progress=False)  # fmt: skip


def _lin(store: Path, name: str, extra_config: str = "") -> None:
    src = store.parent / f"{name}-src"
    src.mkdir()
    (src / "model.py").write_text(LIN_MODEL)
    (src / "model-config.yaml").write_text("batchSize: 4\nmaxBatchDelay: 50\n" + extra_config + LIN_CONFIG)
    serve.manual_seed(0)
    serve.save(_Lin().state_dict(), src / "lin.pt")
    package(name, "1.0", "tensor", model_file=src / "model.py", serialized_file=src / "lin.pt",
            config_file=src / "model-config.yaml", export_path=store, progress=False)  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("optimize")
    store = base / "store"
    store.mkdir()
    _digits(store, "digits")
    _digits(store, "digits_eager", "optimize: false\n")
    _lin(store, "lin", "example_input_shape: [4]\n")
    _lin(store, "lin_eager", "optimize: false\n")
    _lin(store, "lin_bad", "optimize: notabool\n")
    models = ("digits=digits.mar", "digits_eager=digits_eager.mar", "lin=lin.mar", "lin_eager=lin_eager.mar")
    proc = ServerProcess(base / "run", store, "--ncs", "--disable-token-auth", "--enable-model-api", "--models",
                         *models).start()  # fmt: skip
    try:
        yield proc
    finally:
        proc.stop()


def _worker(server: ServerProcess, model: str) -> dict:
    [described] = httpx.get(f"{server.management}/models/{model}", timeout=30).json()
    [worker] = described["workers"]
    assert worker["status"] == "READY"
    return worker


def test_describe_shows_an_optimized_model_and_its_warm_up(server: ServerProcess) -> None:
    lin = _worker(server, "lin")  # batchSize 4: every size 1..4 warmed before the worker was ready
    assert (lin["optimized"], lin["optimizeReason"], lin["warmedBatchSizes"]) == (True, None, [1, 2, 3, 4])


def test_digits_runs_optimized_warmed_for_every_batch_size(server: ServerProcess) -> None:
    digits = _worker(server, "digits")
    assert (digits["optimized"], digits["optimizeReason"]) == (True, None), digits["optimizeReason"]
    assert digits["warmedBatchSizes"] == list(range(1, 9))  # digits' batchSize 8: every size, before ready


def test_describe_shows_why_a_model_runs_eagerly(server: ServerProcess) -> None:
    for model in ("digits_eager", "lin_eager"):
        worker = _worker(server, model)
        assert (worker["optimized"], worker["optimizeReason"]) == (False, "optimize: false in the model-config")
        assert worker["warmedBatchSizes"] == []


def test_describe_keeps_torchserves_worker_fields(server: ServerProcess) -> None:
    worker = _worker(server, "lin")
    assert list(worker)[:7] == ["id", "startTime", "status", "memoryUsage", "pid", "gpu", "gpuUsage"]


def test_a_wrong_optimize_value_is_refused(server: ServerProcess) -> None:
    answer = httpx.post(f"{server.management}/models?url=lin_bad.mar&initial_workers=1&synchronous=true", timeout=60)
    assert answer.status_code == 400
    assert "optimize 'notabool' is not valid: expected true or false" in answer.json()["message"]
    assert httpx.get(f"{server.management}/models/lin_bad").status_code == 404


def test_answers_are_the_same_optimized_or_not(server: ServerProcess) -> None:
    png = (DIGITS / "sample.png").read_bytes()
    answers = [httpx.post(f"{server.inference}/predictions/{m}", content=png, timeout=30) for m in ("digits",
               "digits_eager")]  # fmt: skip
    assert [a.status_code for a in answers] == [200, 200]
    optimized, eager = (a.json() for a in answers)
    assert list(optimized) == list(eager) and max(optimized, key=optimized.get) == "7"
    np.testing.assert_allclose([optimized[k] for k in eager], list(eager.values()), rtol=0, atol=1e-5)

    rows = np.random.default_rng(1).standard_normal((3, 4)).round(4).tolist()
    for row in rows:
        got = [httpx.post(f"{server.inference}/predictions/{m}", json=row, timeout=30) for m in ("lin", "lin_eager")]
        assert [g.status_code for g in got] == [200, 200]
        np.testing.assert_allclose(got[0].json(), got[1].json(), rtol=0, atol=1e-5)
