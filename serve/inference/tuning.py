"""Kernel choices kept across processes: a layer's timed choice, per CPU and build, reused by the next process.

A plan times every kernel that can run a layer the first time the layer sees an input shape (choosing.py). For
ResNet-18 warmed at batch sizes 1-8 that is ~20-35 s on a 2-core machine, paid again by every worker a model scales
to, every restart, and by the first request of each batch size the warm-up budget did not reach. The choice depends
only on the layer's signature (its kind, weight shape, strides, padding, groups, what is fused into it, the input's
shape and layout), the kernels on offer, and the machine: so it is kept in a JSON file per machine, and a layer
with a signature already there takes the kept kernel without timing (as `cudnn.benchmark` would, had it a memory).

- Where: `$SERVE_TUNING_CACHE` (a directory), else `$XDG_CACHE_HOME/serve/tuning`, else `~/.cache/serve/tuning`.
  `SERVE_TUNING_CACHE=off` turns it off. A directory that cannot be written (a read-only image) only means every
  process times its layers again; it never fails a load.
- The file's name is a hash of the machine: serve's version, the native kernel builds in use (each library's size and
  mtime) with the CPU's model name, and the thread count. A new CPU, build or thread count starts a new file.
- Safety: a kept choice is one of the kernels the layer offers (anything else in the file is ignored), the kernels
  were checked against the reference kernel on that signature when first timed, and the warm-up still checks the
  whole plan against eager for every batch size (optimized.py), as it does without the cache.
- A choice timed while other work loaded the machine stays until its file is deleted (the next process times
  again); `describe()` of a plan shows the kernels chosen.
- Writers: each process merges what the file holds with its own choices and replaces the file whole
  (`os.replace`), so concurrent workers never leave a torn file; at worst one's new entries wait for its next write.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import serve
from serve.backend import cpu_threads

log = logging.getLogger(__name__)

ENV = "SERVE_TUNING_CACHE"
_lock = threading.Lock()
_state: dict[str, Any] = {"path": None, "entries": None}


def cache_dir() -> Path | None:
    """The directory the choices live in, or None when the cache is off."""
    configured = os.environ.get(ENV, "").strip()
    if configured.lower() in ("off", "0", "false", "no"):
        return None
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "serve" / "tuning"


def machine_key() -> str:
    from serve.backend import cpu_native

    identity = f"serve {serve.__version__}|{cpu_native.build_id()}|threads {cpu_threads.get_num_threads()}"
    return hashlib.sha256(identity.encode()).hexdigest()[:20]


def _file() -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / f"kernels-{machine_key()}.json"


def _entries(path: Path) -> dict[str, str]:
    """The file's choices (read once per process and path); {} for a missing or unreadable file."""
    if _state["path"] != path:
        _state["path"], _state["entries"] = path, _read(path)
    return _state["entries"]


def _read(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.info("kernel choice cache %s not read (%s): layers are timed again", path, e)
        return {}
    if not isinstance(data, dict) or not isinstance(data.get("choices"), dict):
        return {}
    return {k: v for k, v in data["choices"].items() if isinstance(k, str) and isinstance(v, str)}


def lookup(signature: str) -> str | None:
    """The kernel kept for a layer of this signature on this machine, or None."""
    path = _file()
    if path is None:
        return None
    with _lock:
        return _entries(path).get(signature)


def store(signature: str, choice: str) -> None:
    """Keep `choice` for the signature: in memory, and in the file (merged with what other processes wrote)."""
    path = _file()
    if path is None:
        return
    with _lock:
        entries = _entries(path)
        if entries.get(signature) == choice:
            return
        entries.update(_read(path))  # what other workers kept since this process read the file
        entries[signature] = choice
        _write(path, entries)


def _write(path: Path, entries: dict[str, str]) -> None:
    partial = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=path.parent, prefix=".kernels-")
        with os.fdopen(fd, "w") as f:
            json.dump({"serve": serve.__version__, "choices": entries}, f, sort_keys=True)
        os.replace(partial, path)
        partial = None
    except OSError as e:
        log.debug("kernel choice cache %s not written (%s)", path, e)
    finally:
        if partial is not None:
            with contextlib.suppress(OSError):
                os.unlink(partial)


def forget() -> None:
    """Drop what this process read (tests, and a changed SERVE_TUNING_CACHE)."""
    with _lock:
        _state["path"], _state["entries"] = None, None


class TuningClock:
    """When a plan's layers stop timing kernels (a `time.perf_counter()` deadline; None: never), shared by them.
    The worker sets it to its warm-up budget (serve/worker/optimizing.py): a layer first seen after it takes its
    preferred kernel (the last that applies) untimed, so a model whose timing alone would outlast the startup
    timeout (a detector at 800 x 1088: 55 s on an idle 2-core machine, 180 s at load 6) still starts in time."""

    def __init__(self) -> None:
        self.deadline: float | None = None

    def over(self) -> bool:
        return self.deadline is not None and time.perf_counter() >= self.deadline
