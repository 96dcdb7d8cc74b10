"""`spawn(argv, cwd, env)`: start a worker process without fork(), with asyncio streams on its stdin/stdout/stderr.

Decision: worker processes are started the way posix_spawn starts them, vfork + exec (CPython's `subprocess` on
Linux uses vfork when no `preexec_fn` or user/group change is asked), never by fork(). The event loop's own
`create_subprocess_exec` forks under uvloop (libuv's fork, with the interpreter's and every library's at-fork
handlers run around it). gRPC's fork support then pauses its threads and resets its pollers inside the live
server process while other threads are serving calls: calls on new connections failed with UNAVAILABLE ("Received
unexpected settings ack", "Socket closed") while workers were being started (issue 17 item 8: 7-16 of 600 register,
scale and list calls). A vfork child shares the parent's memory only until its exec, no at-fork handler runs and no
thread of the server is paused, so the gRPC servers never see a fork. It is also cheaper than fork() of a large
server process (no page tables copied), so workers start no slower.

The exit is noticed from a pidfd (Linux >= 5.3) on the event loop, or else from a thread blocked in waitpid.
The interface is the part of `asyncio.subprocess.Process` the worker uses: `pid`, `returncode`, `stdin` (a
StreamWriter), `stdout`/`stderr` (StreamReaders) and `wait()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
from asyncio.streams import FlowControlMixin
from collections.abc import Sequence
from typing import Any


class SpawnedProcess:
    """A child process started by `spawn`; its exit sets `returncode` (negative: killed by that signal)."""

    def __init__(self, popen: subprocess.Popen[bytes], stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader,
                 stderr: asyncio.StreamReader) -> None:  # fmt: skip
        self._popen = popen
        self.pid = popen.pid
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self._exited = asyncio.Event()
        self._watch_exit(asyncio.get_running_loop())

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode if self._exited.is_set() else None

    async def wait(self) -> int:
        """Wait for the process to exit; its return code."""
        await self._exited.wait()
        return int(self._popen.returncode or 0)

    def _watch_exit(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # no pidfd (kernel < 5.3): a thread waits instead
            threading.Thread(target=self._wait_in_thread, args=(loop,), name=f"wait-{self.pid}", daemon=True).start()
            return

        def exited() -> None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            self._popen.wait()  # reaps it: the pidfd is readable once the process has exited
            self._exited.set()

        loop.add_reader(pidfd, exited)

    def _wait_in_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        self._popen.wait()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(self._exited.set)


async def spawn(argv: Sequence[str], cwd: str, env: dict[str, str], stream_limit: int,
                pass_fds: Sequence[int] = ()) -> SpawnedProcess:  # fmt: skip
    """Start `argv` in `cwd` with `env`, in its own session, its three standard streams piped to this process, and
    the file descriptors `pass_fds` kept open in it (under the same numbers)."""
    loop = asyncio.get_running_loop()
    popen = subprocess.Popen(  # vfork + exec: see the module docstring
        list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
        cwd=cwd, env=env, start_new_session=True, close_fds=True, pass_fds=tuple(pass_fds),
    )  # fmt: skip
    assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
    try:
        stdout = await _reader(loop, popen.stdout, stream_limit)
        stderr = await _reader(loop, popen.stderr, stream_limit)
        transport, protocol = await loop.connect_write_pipe(FlowControlMixin, popen.stdin)
    except BaseException:
        popen.kill()
        popen.wait()
        raise
    stdin = asyncio.StreamWriter(transport, protocol, None, loop)
    return SpawnedProcess(popen, stdin, stdout, stderr)


async def _reader(loop: asyncio.AbstractEventLoop, pipe: Any, limit: int) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)
    return reader
