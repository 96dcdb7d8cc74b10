"""`HeartbeatPipe`: the server's end of one worker's heartbeat pipe (the worker's side: serve/worker/heartbeat.py).

    beat = HeartbeatPipe()                  # before the spawn: pass beat.child_fd to the worker (--heartbeat-fd)
    beat.attach()                           # after it: the child's end is closed here, ours read on the event loop
    beat.silence()                          # seconds since the last beat
    beat.close()

Decisions:
- Beats are read on the event loop as they come, and `silence()` reads what the pipe holds before it answers:
  a server whose own loop was held up (a loaded machine) finds the beats the worker wrote meanwhile and never takes
  its own delay for the worker's silence.
- The pipe only says the process runs. Whether silence means a hang, and what to do about it, is the worker
  handle's decision (worker_process.py): a worker that exited is told apart by its exit, not by its pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time


class HeartbeatPipe:
    """A pipe whose write end a worker inherits; remembers when a beat last arrived."""

    def __init__(self) -> None:
        self._fd, self.child_fd = os.pipe()
        os.set_blocking(self._fd, False)
        self.last = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None

    def attach(self) -> None:
        """The worker holds its end now: close ours of it (so its exit ends the pipe) and read beats as they come."""
        self._close_child_end()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._fd, self._read)
        self.last = time.monotonic()

    def restart_clock(self) -> None:
        """Count silence from now (the worker just answered otherwise, e.g. its ready handshake)."""
        self._read()
        self.last = time.monotonic()

    def silence(self) -> float:
        """Seconds since the last beat, after reading whatever beats the pipe holds."""
        self._read()
        return time.monotonic() - self.last

    def close(self) -> None:
        self._close_child_end()
        if self._fd < 0:
            return
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed already
                self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1

    def _read(self) -> None:
        if self._fd < 0:
            return
        try:
            while data := os.read(self._fd, 4096):
                self.last = time.monotonic()
                if len(data) < 4096:
                    return
        except BlockingIOError:
            return
        except OSError:
            pass
        # end of file (or a broken pipe): the worker's end is closed; nothing more will come
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.remove_reader(self._fd)
            self._loop = None

    def _close_child_end(self) -> None:
        if self.child_fd >= 0:
            os.close(self.child_fd)
            self.child_fd = -1
