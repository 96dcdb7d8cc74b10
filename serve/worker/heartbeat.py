"""The worker's heartbeat: a thread that writes one byte to the heartbeat pipe every `interval` seconds.

    heartbeat.start(fd, interval)      # fd: the pipe's write end the server passed (--heartbeat-fd)

The server (serve/management/worker_process.py) reads the other end and replaces a READY worker that stays silent
for `worker_heartbeat_interval` x `worker_heartbeat_misses` seconds.

Decisions:
- A thread, not the batch loop: it beats while a batch runs, so a long batch (a handler that sleeps, waits on I/O,
  or computes in numpy or native kernels with the GIL released) is never taken for a hang. What silences it is what
  stops the whole process: SIGSTOP, a deadlock or a native call that holds the GIL, a process the machine no longer
  runs. A main thread that waits for ever on a Python lock still beats: that batch ends at `response_timeout`.
- Its own pipe, not the protocol's stdout: no lock shared with the batch replies, and the server reads it whether
  or not a batch runs.
- Non-blocking writes: a beat that finds the pipe full (the server has not read for a while) is dropped, so the
  thread never blocks; once the server's end is closed (EPIPE) the thread ends.
"""

from __future__ import annotations

import os
import threading
import time

BEAT = b"."


def start(fd: int, interval: float) -> threading.Thread:
    """Beat on `fd` every `interval` seconds from a daemon thread, from now until the process exits."""
    os.set_blocking(fd, False)
    os.set_inheritable(fd, False)  # processes the handler starts must not hold the server's pipe
    thread = threading.Thread(target=_beat, args=(fd, interval), name="serve-heartbeat", daemon=True)
    thread.start()
    return thread


def _beat(fd: int, interval: float) -> None:
    while True:
        try:
            os.write(fd, BEAT)
        except BlockingIOError:
            pass  # the server has beats it has not read yet: this one adds nothing
        except OSError:
            return  # the server closed its end
        time.sleep(interval)
