"""Config snapshot files on disk: their names, finding the latest, reading its `model_snapshot`.

A snapshot is a properties file `<yyyyMMddHHmmssSSS>-snapshot.cfg` in the snapshot dir holding a
`model_snapshot=<JSON>` line, as TorchServe writes them (its `-startup.cfg` and `-shutdown.cfg` files are read
too, so TorchServe's own snapshots restore). The writer is serve.management.snapshot; the reading lives here
because the loader needs it and config sits below management.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from serve.config import values
from serve.config.properties import parse_properties
from serve.errors import ConfigError

SNAPSHOT_FILE = re.compile(r"(\d{17})-(startup|snapshot|shutdown)\.cfg")
SNAPSHOT_KEY = "model_snapshot"


def snapshot_files(snapshot_dir: Path) -> list[Path]:
    """The snapshot files in `snapshot_dir`, oldest first (names sort by their timestamp)."""
    if not snapshot_dir.is_dir():
        return []
    found = [p for p in snapshot_dir.iterdir() if SNAPSHOT_FILE.fullmatch(p.name) and p.is_file()]
    return sorted(found, key=lambda p: p.name)


def read_snapshot(path: Path) -> dict[str, Any]:
    """The `model_snapshot` structure of one snapshot file; ConfigError when it is unreadable or malformed."""
    hint = "fix or delete it, or start with --ncs to ignore snapshots"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the config snapshot {path}: {e}; {hint}") from None
    props = parse_properties(text, str(path))
    if SNAPSHOT_KEY not in props:
        raise ConfigError(f"config snapshot {path} has no {SNAPSHOT_KEY} line; {hint}")
    try:
        return values.model_snapshot(SNAPSHOT_KEY, props[SNAPSHOT_KEY])
    except ConfigError as e:
        raise ConfigError(f"config snapshot {path}: {e}; {hint}") from None


def latest_snapshot(snapshot_dir: Path) -> dict[str, Any] | None:
    """The newest snapshot's `model_snapshot` structure, or None when there is no snapshot."""
    files = snapshot_files(snapshot_dir)
    return read_snapshot(files[-1]) if files else None
