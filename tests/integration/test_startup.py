"""Start-up tells the truth (issue 24 item 8), on real server processes.

- A startup model that cannot be registered (its archive is missing, its model-config is refused) refuses the
  start: the server exits 2 with one line naming each such model and why, and `/ping` is never Healthy on the way
  (TorchServe logs it and answers Healthy with the model missing).
- A folder named `serve` in the working directory (TorchServe's READMEs have users work beside a clone named
  `serve`) or among a model's files is never imported in place of serve: the command a background `serve start`
  runs (serve.cli.control.child_command) comes up healthy there, and its worker loads and answers, with the
  model's own files still importable when the handler asks for them at request time.
"""

from __future__ import annotations

import contextlib
import time
import zipfile
from pathlib import Path

import httpx

import serve
from serve.archive import package
from serve.cli import control
from tests.integration.server import LIN_MODEL, PROBE_SECONDS, START_SECONDS, ServerProcess, _Lin, lin_archive

FLAGS = ("--ncs", "--disable-token-auth")
REQUEST_SECONDS = 120  # one prediction on a loaded machine
SHADOW = 'raise ImportError("a folder named serve was imported in place of serve")\n'
# a function handler that imports a file of its model at request time (TorchServe handlers do)
LATE_IMPORT = """
def handle(data, context):
    if data is None:
        return None
    import helper

    return [helper.ANSWER for _ in data]
"""


def _stateful_archive(src: Path, store: Path) -> None:
    """`<store>/stateful.mar`: the lin model with a model-config key serve refuses (useJobTicket)."""
    src.mkdir(parents=True)
    (src / "model.py").write_text(LIN_MODEL)
    (src / "model-config.yaml").write_text("useJobTicket: true\n")
    serve.save(_Lin().state_dict(), src / "lin.pt")
    package("stateful", "1.0", "tensor", model_file=src / "model.py", serialized_file=src / "lin.pt",
            config_file=src / "model-config.yaml", export_path=store, progress=False)  # fmt: skip


def _pings_until_exit(server: ServerProcess) -> list[int]:
    """Every /ping status the server answered until its process exited or said Healthy (bounded by START_SECONDS)."""
    assert server.proc is not None
    answers: list[int] = []
    deadline = time.monotonic() + START_SECONDS
    while server.proc.poll() is None and time.monotonic() < deadline and 200 not in answers:
        if server.read_ports():
            with contextlib.suppress(httpx.TransportError):
                answers.append(httpx.get(server.inference + "/ping", timeout=PROBE_SECONDS).status_code)
        time.sleep(0.05)
    return answers


def test_a_startup_model_that_cannot_be_registered_refuses_the_start(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    lin_archive(tmp_path / "lin", store)
    _stateful_archive(tmp_path / "stateful", store)
    server = ServerProcess(tmp_path / "run", store, *FLAGS, "--models", "lin=lin.mar", "gone=missing.mar",
                           "stateful=stateful.mar")  # fmt: skip
    server.launch()
    try:
        answers = _pings_until_exit(server)
    finally:
        code = server.stop()
    log = server.log()
    assert code == 2, log
    assert "serve: startup model(s) could not be registered: gone (missing.mar): " in log, log
    assert "; stateful (stateful.mar): " in log and "useJobTicket" in log, log
    assert 200 not in answers, answers


def test_a_folder_named_serve_is_not_imported_by_the_server_or_its_worker(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (tmp_path / "late_handler.py").write_text(LATE_IMPORT)
    (tmp_path / "helper.py").write_text("ANSWER = 'from the model directory'\n")
    built = package("late", "1.0", f"{tmp_path / 'late_handler.py'}:handle", extra_files=[tmp_path / "helper.py"],
                    export_path=tmp_path, progress=False)  # fmt: skip
    with zipfile.ZipFile(built) as archive:
        archive.extractall(store / "late")  # a model directory, with a `serve` package among its files
    (store / "late" / "serve").mkdir()
    (store / "late" / "serve" / "__init__.py").write_text(SHADOW)
    server = ServerProcess(tmp_path / "run", store, *FLAGS, "--models", "late=late")
    clone = server.workdir / "serve" / "ts"  # TorchServe's clone: a namespace package named serve
    clone.mkdir(parents=True)
    (clone / "__init__.py").write_text(SHADOW)
    server.launch(control.child_command(server.start_args()), control.child_environment())
    try:
        deadline = time.monotonic() + START_SECONDS
        while not _healthy(server):
            assert server.proc is not None and server.proc.poll() is None, f"serve exited:\n{server.log()}"
            assert "in place of serve" not in server.log(), server.log()  # a worker imported the model's folder
            assert time.monotonic() < deadline, f"not healthy within {START_SECONDS} s:\n{server.log()}"
            time.sleep(0.1)
        answer = httpx.post(f"{server.inference}/predictions/late", content=b"x", timeout=REQUEST_SECONDS)
        assert (answer.status_code, answer.text) == (200, "from the model directory"), server.log()
    finally:
        assert server.stop() == 0, server.log()


def _healthy(server: ServerProcess) -> bool:
    if not server.read_ports():
        return False
    try:
        return httpx.get(server.inference + "/ping", timeout=PROBE_SECONDS).status_code == 200
    except httpx.TransportError:
        return False
