"""Per-model Python dependencies: TorchServe's `install_py_dep_per_model=true`.

An archive names its requirements file in the manifest's `requirementsFile` (model-archiver's
`--requirements-file`, usually `requirements.txt`). With `install_py_dep_per_model=true` in config.properties
(false by default, as in TorchServe) registration runs, before any worker starts,

    <server's python> -m pip install -U --target <deps dir> -r <model dir>/<requirementsFile>

in the model's directory (so relative paths and pip options the file carries, `--find-links wheels`,
`--extra-index-url ...`, resolve as in TorchServe, which runs pip there too), and every worker of the model version
starts with `<deps dir>` on its PYTHONPATH. pip's output goes line by line to the `MODEL_LOG` logger, prefixed
with the model; a failed install refuses the registration (InvalidInput, a 400) with pip's last lines, and the
deps directory is removed with the model version. When the key is off, an archive with a requirements file is
registered as before, with one log line saying the file was not installed and how to turn the install on.

Decisions:
- `pip install --target` with the server's own interpreter, not a venv per model (TorchServe's `useVenv`): the
  worker must import serve itself from the server's environment, which a fresh venv does not see unless it is made
  with `--system-site-packages` (and then it is the same overlay as --target, with a venv's creation and pip
  bootstrap, seconds and megabytes per model, on top). The deps directory comes before the server's
  site-packages on the worker's path, so a model's pinned version wins in its own workers only; the server's
  environment is never written to.
- The deps directory is a temporary directory of its own (`serve-deps-<model>-*`), not the model directory as in
  TorchServe: a model registered from an unpacked directory in the model store is then never written into, and
  removing the model version removes its packages.
- pip runs with the server's environment plus `PIP_NO_INPUT` and `PIP_DISABLE_PIP_VERSION_CHECK` (no prompt can
  hang a registration), for at most `PIP_TIMEOUT_S`; it runs in a thread (registration awaits it) and is started
  by subprocess's vfork + exec, never fork() (see spawn.py).
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from serve.archive import ModelArchive
from serve.config import Settings
from serve.errors import InvalidInput

log = logging.getLogger(__name__)
model_log = logging.getLogger("MODEL_LOG")
PIP_TIMEOUT_S = 1800
ERROR_LINES = 15  # pip's last lines quoted in a failed registration's message


def requirements_file(archive: ModelArchive) -> Path | None:
    """The archive's requirements file (manifest `requirementsFile`), None when it names none."""
    name = archive.manifest.get("model", {}).get("requirementsFile")
    return archive.model_dir / name if name else None


def install_requirements(archive: ModelArchive, name: str, settings: Settings) -> Path | None:
    """Install the archive's requirements into a new deps directory and return it (None: nothing installed).

    InvalidInput with pip's message when pip fails; the directory is removed then."""
    requirements = requirements_file(archive)
    if requirements is None:
        return None
    where = f"model {name} version {archive.model_version}"
    if not settings.install_py_dep_per_model:
        log.info("%s: its requirements file %s was not installed (install_py_dep_per_model is false); set "
                 "install_py_dep_per_model=true in config.properties to install it for this model's workers, or "
                 "install the packages into the server's environment", where, requirements.name)  # fmt: skip
        return None
    target = Path(tempfile.mkdtemp(prefix=f"serve-deps-{name}-"))
    command = [sys.executable, "-m", "pip", "install", "-U", "--target", str(target), "-r", str(requirements)]
    log.info("%s: installing %s into %s", where, requirements.name, target)
    code, tail = _run_pip(command, archive.model_dir, f"[{name} {archive.model_version} pip]")
    if code != 0:
        remove_deps(target)
        output = "\n".join(tail)
        raise InvalidInput(f"Custom pip package installation failed for {where} ({requirements.name}, pip "
                           f"exited with {code}); fix the requirements file, or set install_py_dep_per_model=false "
                           f"and install the packages yourself:\n{output}")  # fmt: skip
    log.info("%s: installed %s into %s", where, requirements.name, target)
    return target


def remove_deps(target: Path | None) -> None:
    """Remove a deps directory install_requirements made (a no-op for None or what is already gone)."""
    if target is not None:
        shutil.rmtree(target, ignore_errors=True)


def _run_pip(command: list[str], cwd: Path, prefix: str) -> tuple[int, list[str]]:
    """Run pip, logging its output to MODEL_LOG; its exit code (124 after PIP_TIMEOUT_S) and last lines."""
    env = {**os.environ, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    tail: collections.deque[str] = collections.deque(maxlen=ERROR_LINES)
    try:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")  # fmt: skip
    except OSError as e:
        return 127, [f"cannot run {command[0]} -m pip: {e}"]
    timed_out = threading.Event()

    def stop() -> None:
        timed_out.set()
        proc.kill()

    timer = threading.Timer(PIP_TIMEOUT_S, stop)
    timer.start()
    try:
        assert proc.stdout is not None  # stdout=PIPE
        for line in proc.stdout:
            line = line.rstrip()
            tail.append(line)
            model_log.info("%s %s", prefix, line)
        code = proc.wait()
    finally:
        timer.cancel()
    if timed_out.is_set():
        tail.append(f"pip was stopped after {PIP_TIMEOUT_S} s")
        code = 124
    return code, list(tail)
