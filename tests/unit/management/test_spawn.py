"""serve/management/spawn.py: workers start without fork() (no at-fork handler runs in the server, issue 17 item 8),
with the cwd, environment, own session and pipes that WorkerProcess relies on, and exits are noticed.

The reference for "a fork happened" is the interpreter's at-fork hook (`os.register_at_fork`), which uvloop's
subprocess support runs around its fork (as gRPC's own handlers run): the test shows the event loop's
`create_subprocess_exec` triggers it under uvloop and `spawn` never does.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from serve.management.spawn import spawn

FORKS: list[int] = []
os.register_at_fork(before=lambda: FORKS.append(os.getpid()))

ECHO = "import os, sys\nsys.stderr.write('cwd=' + os.getcwd() + ' x=' + os.environ['X'] + '\\n')\n" \
       "sys.stdout.write(sys.stdin.read().upper())\n"  # fmt: skip


def _run(main: Callable[[], Awaitable[Any]], uvloop_: bool = False) -> Any:
    if uvloop_:
        uvloop = pytest.importorskip("uvloop")
        return uvloop.run(main())
    return asyncio.run(main())


@pytest.mark.parametrize("use_uvloop", [False, True])
def test_spawn_pipes_cwd_env_session_and_exit(tmp_path: Path, use_uvloop: bool) -> None:
    async def main() -> tuple[int, bytes, bytes, int, int]:
        before = len(FORKS)
        proc = await spawn([sys.executable, "-c", ECHO], cwd=str(tmp_path), env={**os.environ, "X": "42"},
                           stream_limit=1 << 16)  # fmt: skip
        forks = len(FORKS) - before
        session = os.getsid(proc.pid)
        proc.stdin.write(b"hello")
        await proc.stdin.drain()
        proc.stdin.close()
        out = await asyncio.wait_for(proc.stdout.read(), 30)
        err = await asyncio.wait_for(proc.stderr.read(), 30)
        code = await asyncio.wait_for(proc.wait(), 30)
        assert proc.returncode == code
        return forks, out, err, code, session - proc.pid

    forks, out, err, code, session = _run(main, use_uvloop)
    assert forks == 0, "spawn ran the at-fork handlers: it forked the server process"
    assert out == b"HELLO"
    assert err.decode().strip() == f"cwd={tmp_path} x=42"
    assert code == 0
    assert session == 0, "the worker leads its own session"


def test_uvloop_subprocess_forks_which_spawn_avoids(tmp_path: Path) -> None:
    """The reference: the event loop's own subprocess support under uvloop runs the at-fork handlers."""

    async def main() -> int:
        before = len(FORKS)
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass", cwd=str(tmp_path))
        await proc.wait()
        return len(FORKS) - before

    assert _run(main, uvloop_=True) >= 1


@pytest.mark.parametrize("use_uvloop", [False, True])
def test_a_killed_process_is_noticed_and_its_stdin_says_so(tmp_path: Path, use_uvloop: bool) -> None:
    async def main() -> tuple[int | None, type[BaseException] | None]:
        proc = await spawn([sys.executable, "-c", "import time; time.sleep(60)"], cwd=str(tmp_path),
                           env=dict(os.environ), stream_limit=1 << 16)  # fmt: skip
        assert proc.returncode is None
        os.killpg(proc.pid, signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), 30)
        error: type[BaseException] | None = None
        try:
            for _ in range(64):  # the pipe buffer fills or the closed pipe is reported
                if proc.stdin.is_closing():  # what WorkerProcess.send checks before writing
                    raise BrokenPipeError
                proc.stdin.write(b"x" * 65536)
                await asyncio.wait_for(proc.stdin.drain(), 5)
        except (BrokenPipeError, ConnectionResetError) as e:
            error = type(e)
        return proc.returncode, error

    code, error = _run(main, use_uvloop)
    assert code == -signal.SIGKILL
    assert error is not None


def test_a_missing_executable_is_an_error_and_nothing_is_left(tmp_path: Path) -> None:
    async def main() -> None:
        await spawn([str(tmp_path / "nope")], cwd=str(tmp_path), env={}, stream_limit=1024)

    with pytest.raises(FileNotFoundError):
        _run(main)
