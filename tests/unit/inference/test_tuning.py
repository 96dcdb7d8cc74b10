"""The kernel choice cache (serve.inference.tuning): a choice timed in one process is taken, untimed, by the next."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import serve
from serve import nn
from serve.inference import optimize, tuning

ROOT = Path(__file__).resolve().parents[3]


def _model() -> nn.Module:
    serve.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8 * 8 * 8, 10)).eval()  # fmt: skip


def _x(batch: int) -> serve.Tensor:
    return serve.from_numpy(np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(tuning.ENV, str(tmp_path))
    tuning.forget()
    yield tmp_path
    tuning.forget()


def _layers(opt: object) -> list:
    return opt.layers()  # type: ignore[attr-defined]


def test_a_kept_choice_is_taken_without_timing(cache: Path) -> None:
    first = optimize(_model(), example_inputs=(_x(2),))
    chosen = {id(layer): dict(layer.choices) for layer in _layers(first)}
    assert all(layer.timings for layer in _layers(first)), "the first process times every layer"
    [file] = cache.glob("kernels-*.json")
    kept = json.loads(file.read_text())["choices"]
    assert len(kept) == len(_layers(first)) and set(kept.values()) <= {n for c in chosen.values() for n in c.values()}

    tuning.forget()  # as a new process would: read the file again
    second = optimize(_model(), example_inputs=(_x(2),))
    for before, after in zip(_layers(first), _layers(second), strict=True):
        assert after.choices == before.choices and after.timings == {}
    with serve.no_grad():
        np.testing.assert_allclose(second(_x(2)).numpy(), _model()(_x(2)).numpy(), rtol=1e-4, atol=1e-5)

    third = optimize(_model(), example_inputs=(_x(3),))  # a new batch size is a new signature: timed, then kept
    assert all(layer.timings for layer in _layers(third))
    assert len(json.loads(file.read_text())["choices"]) == 2 * len(kept)


def test_a_choice_the_layer_does_not_offer_is_ignored(cache: Path) -> None:
    optimize(_model(), example_inputs=(_x(2),))
    [file] = cache.glob("kernels-*.json")
    data = json.loads(file.read_text())
    data["choices"] = {key: "no_such_kernel" for key in data["choices"]}
    file.write_text(json.dumps(data))
    tuning.forget()
    again = optimize(_model(), example_inputs=(_x(2),))
    assert all(layer.timings for layer in _layers(again)) and again.optimized
    assert "no_such_kernel" not in json.loads(file.read_text())["choices"].values()


@pytest.mark.parametrize("content", ["{not json", '{"choices": [1, 2]}', '["x"]'])
def test_a_broken_file_means_timing_again(cache: Path, content: str) -> None:
    optimize(_model(), example_inputs=(_x(2),))
    [file] = cache.glob("kernels-*.json")
    file.write_text(content)
    tuning.forget()
    opt = optimize(_model(), example_inputs=(_x(2),))
    assert opt.optimized and all(layer.timings for layer in _layers(opt))
    assert json.loads(file.read_text())["choices"], "rewritten whole"


def test_off_and_an_unwritable_directory_never_fail_a_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tuning.ENV, "off")
    tuning.forget()
    assert tuning.cache_dir() is None and optimize(_model(), example_inputs=(_x(2),)).optimized
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setenv(tuning.ENV, str(blocked / "cache"))
    tuning.forget()
    assert optimize(_model(), example_inputs=(_x(2),)).optimized
    tuning.forget()


def test_the_file_is_per_machine_and_threads(cache: Path) -> None:
    before = tuning.machine_key()
    threads = serve.get_num_threads()
    serve.set_num_threads(threads + 1)
    try:
        assert tuning.machine_key() != before
    finally:
        serve.set_num_threads(threads)
    assert tuning.machine_key() == before


def test_another_process_takes_the_choices(cache: Path) -> None:
    script = """
import numpy as np, serve
from tests.unit.inference.test_tuning import _model, _x
from serve.inference import optimize
opt = optimize(_model(), example_inputs=(_x(2),))
print(sum(bool(layer.timings) for layer in opt.layers()), len(opt.layers()))
"""
    env = {"SERVE_TUNING_CACHE": str(cache), "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    runs = [subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120, check=True).stdout.split() for _ in range(2)]  # fmt: skip
    timed_first, layers = map(int, runs[0])
    assert timed_first == layers > 0 and runs[1] == ["0", str(layers)]
