"""The pid file of the running server: `{tmp}/.serve.pid`, one JSON record, as TorchServe's `.model_server.pid`.

    {"pid": 4242, "start_ticks": 123456, "inference_address": "http://127.0.0.1:8080", ...,
     "key_file": "/srv/key_file.json", "log_file": "/srv/logs/serve.log"}

A different name from TorchServe's, so both can run on one machine (the benchmarks do). `start_ticks` is the
process start time from /proc: a pid file left by a crash whose pid was later reused by another program is
recognised as stale, so `serve stop` never signals a stranger. A record is claimed with an atomic hard link, so
two `serve start` racing cannot both win. A file holding just a number (written by hand) is read as a pid.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

PID_FILE_NAME = ".serve.pid"


@dataclass(frozen=True)
class ServerRecord:
    pid: int
    start_ticks: int | None = None
    inference_address: str = ""
    management_address: str = ""
    metrics_address: str = ""
    key_file: str | None = None
    log_file: str | None = None


def pid_file_path() -> Path:
    """Where the pid file lives (the temp dir, like TorchServe's)."""
    return Path(tempfile.gettempdir()) / PID_FILE_NAME


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22); None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # the command name may hold spaces and parentheses
    return int(fields[19]) if len(fields) > 19 else None


def is_running(record: ServerRecord) -> bool:
    """The recorded process exists, is not a zombie, and is the same process (same start time)."""
    try:
        os.kill(record.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists but belongs to another user
    try:
        stat = Path(f"/proc/{record.pid}/stat").read_text()
    except OSError:
        return True  # no /proc (macOS): existence is all we can tell
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    return record.start_ticks is None or record.start_ticks == start_ticks(record.pid)


def read_record(path: Path) -> ServerRecord | None:
    """The record in `path`, or None when there is none or it is unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if isinstance(data, int) and not isinstance(data, bool):
        return ServerRecord(pid=data)
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int):
        return None
    known = {k: v for k, v in data.items() if k in ServerRecord.__dataclass_fields__}
    try:
        return ServerRecord(**known)
    except TypeError:
        return None


def running(path: Path) -> ServerRecord | None:
    """The live server's record; a stale or unreadable pid file is removed."""
    record = read_record(path)
    if record is not None and is_running(record):
        return record
    path.unlink(missing_ok=True)
    return None


def claim(path: Path, record: ServerRecord) -> ServerRecord | None:
    """Write `record` unless a live server holds the file: None on success, else the live server's record."""
    for _ in range(3):  # a stale file is removed and the claim retried; a racing winner ends the loop
        holder = running(path)
        if holder is not None:
            return holder
        tmp = _temp_copy(path, record)
        try:
            os.link(tmp, path)
            return None
        except FileExistsError:
            continue
        finally:
            tmp.unlink(missing_ok=True)
    holder = running(path)
    return holder if holder is not None else record


def replace(path: Path, record: ServerRecord) -> None:
    """Overwrite the pid file atomically (the launcher hands its claim to the server process)."""
    os.replace(_temp_copy(path, record), path)


def release(path: Path, pid: int) -> None:
    """Remove the pid file if it still names `pid`."""
    record = read_record(path)
    if record is not None and record.pid == pid:
        path.unlink(missing_ok=True)


def _temp_copy(path: Path, record: ServerRecord) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=PID_FILE_NAME + ".", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(record), f)
    os.chmod(tmp, 0o644)
    return Path(tmp)
