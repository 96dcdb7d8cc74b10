"""WorkerProcess.memory_usage, read after every batch: the process's resident memory as /proc says it (VmRSS, the
reference), read without a file object (os.open/os.read: 3 system calls instead of 7), 0 for a process gone."""

from __future__ import annotations

import builtins
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from serve.management.worker_process import WorkerProcess


def _worker(pid: int) -> WorkerProcess:
    worker = WorkerProcess.__new__(WorkerProcess)
    worker.pid = pid
    return worker


def test_memory_usage_is_vmrss_read_without_a_file_object(monkeypatch: pytest.MonkeyPatch) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; print('idle', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline() == b"idle\n"  # started: its memory stays put
        status = Path(f"/proc/{child.pid}/status").read_text()
        vmrss = int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]

        def no_open(*args: object, **kwargs: object) -> None:
            raise AssertionError("memory_usage opened a file object")

        monkeypatch.setattr(builtins, "open", no_open)
        rss = _worker(child.pid).memory_usage()
    finally:
        child.communicate(b"")
    assert abs(rss - vmrss) <= 64 * os.sysconf("SC_PAGE_SIZE")  # the child is idle: a few pages at most
    assert _worker(child.pid).memory_usage() == 0  # reaped: no such process
