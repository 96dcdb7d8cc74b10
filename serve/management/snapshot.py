"""Config snapshots: the registered models saved on every change, restored on the next start unless `--ncs`.

    write_snapshot(settings.snapshot_dir, registry.snapshot())   # -> logs/config/20250317120000123-snapshot.cfg
    write_snapshot(settings.snapshot_dir, models, "startup")     # -> ...-startup.cfg (also "shutdown")
    latest_snapshot(settings.snapshot_dir)                       # -> {"name": ..., "modelCount": 2, "models": {...}}

As TorchServe, the registry writes `<stamp>-startup.cfg` once the startup models are registered, `-snapshot.cfg`
after every change and `-shutdown.cfg` at a clean stop (not after a start that failed, which would record no models).
The file is TorchServe's: a properties file with one `model_snapshot=<JSON>` line, the JSON being
{"name": "<stamp>-snapshot.cfg", "modelCount": <number of model versions>, "models": {name: {version:
{"defaultVersion", "marName", "minWorkers", "maxWorkers", "batchSize", "maxBatchDelay", "responseTimeout",
"startupTimeout"}}}}. Unlike TorchServe's it holds no other property (see serve/config/loader.py).

Files are written atomically (a temporary file, fsync, rename), so a crash leaves the previous snapshot intact;
names never go backwards, so the latest is the last name. Only the newest KEEP files are kept (TorchServe keeps
them all, and a busy management API fills the disk).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from serve.config import snapshots, values
from serve.config.properties import format_property

KEEP = 20
KINDS = ("startup", "snapshot", "shutdown")
HEADER = "# serve config snapshot: the registered models, restored on start unless --ncs\n"


def latest_snapshot(snapshot_dir: Path) -> dict[str, Any] | None:
    """The newest snapshot's structure, or None when there is none; ConfigError when it is malformed."""
    return snapshots.latest_snapshot(snapshot_dir)


def write_snapshot(snapshot_dir: Path, models: dict[str, Any], kind: str = "snapshot") -> Path:
    """Save `models` ({name: {version: {...}}}) as a new `<stamp>-<kind>.cfg` file; its path. `kind` is TorchServe's:
    "startup" once the startup models are registered, "snapshot" after each change, "shutdown" at a clean stop."""
    if kind not in KINDS:
        raise ValueError(f"snapshot kind must be one of {KINDS}, got {kind!r}")
    values.models("model_snapshot.models", models)
    snapshot_dir.mkdir(parents=True, exist_ok=True)
    name = f"{_next_stamp(snapshot_dir)}-{kind}.cfg"
    count = sum(len(versions) for versions in models.values())
    body = {"name": name, "modelCount": count, "models": models}
    path = snapshot_dir / name
    _write_atomically(path, HEADER + format_property(snapshots.SNAPSHOT_KEY, json.dumps(body)) + "\n")
    _prune(snapshot_dir)
    return path


def _next_stamp(snapshot_dir: Path) -> int:
    """Now as yyyyMMddHHmmssSSS (TorchServe's local-time stamp), later than every existing snapshot's."""
    now = time.time()
    stamp = int(time.strftime("%Y%m%d%H%M%S", time.localtime(now)) + f"{int(now * 1000) % 1000:03d}")
    files = snapshots.snapshot_files(snapshot_dir)
    if files:
        last = snapshots.SNAPSHOT_FILE.fullmatch(files[-1].name)
        if last is not None:
            stamp = max(stamp, int(last.group(1)) + 1)
    return stamp


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _prune(snapshot_dir: Path) -> None:
    for old in snapshots.snapshot_files(snapshot_dir)[:-KEEP]:
        old.unlink(missing_ok=True)
