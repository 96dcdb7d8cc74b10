"""`WorkerProcess`: the server's side of one worker process (`python -m serve.worker.process`).

It starts the process, waits for its handshake within the startup timeout, sends batches and reads replies over
the protocol of serve/worker/protocol.py (on the process's stdin/stdout; the worker moves its own prints to
stderr), forwards the worker's stderr to the `MODEL_LOG` logger line by line (keeping the last lines for error
messages), and notices when the process exits, whenever that happens.

The worker runs with the model directory as its working directory (as in TorchServe) and serve's source root
first on PYTHONPATH, in its own session, so a Ctrl-C at the server's terminal reaches only the server, which
then stops its workers in order. It runs `python -P`: the working directory is not put first on sys.path, so a
`serve` folder among the model's files never shadows serve's own; the worker puts the model directory first once
serve is imported (serve/worker/process.py), as the working directory was before. It is started without fork()
(spawn.py: a fork in the server would disturb the live gRPC servers). The ready handshake carries the
optimizer's report (whether the model runs optimized, why not, the batch sizes warmed up), kept as `optimization`
for describe. BLAS thread counts are left at their defaults unless the model-config sets
`torchrun: {OMP_NUMBER_THREADS: n}` (TorchServe's key), which sets OMP/OpenBLAS/MKL threads to n.

Hung workers: the worker beats on a pipe of its own from a thread (serve/worker/heartbeat.py), during batches too.
Once READY (and while it stops), a worker silent for `heartbeat_interval` x `heartbeat_misses` seconds (config
`worker_heartbeat_interval`, `worker_heartbeat_misses`: 5 s x 4) is stopped, deadlocked or stuck in native code
holding the GIL: it is killed, `lost_reason` says why, and the batch it held fails with that reason (WorkerError,
"Worker died. ..."). A long batch keeps beating and is left to `response_timeout`. `ended_by` records who ended
the process on purpose (unresponsive, response_timeout, memory), for the restart metric; None when it died on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import serve
from serve.errors import InvalidModel, ModelLoadError, WorkerError
from serve.management.heartbeat import HeartbeatPipe
from serve.management.spawn import SpawnedProcess, spawn
from serve.worker.protocol import REENCODED_TEXT_RATIO, Message, ProtocolError, encode, read_message

model_log = logging.getLogger("MODEL_LOG")
TAIL_LINES = 20
HANDSHAKE_BYTES = 1 << 20
STREAM_BUFFER = 1 << 20  # replies of several MB (image batches) are read with less pausing of the pipe
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

STARTING, READY, UNLOADING, STOPPED, DEAD = "STARTING", "READY", "UNLOADING", "STOPPED", "DEAD"


@dataclass(frozen=True)
class WorkerSpec:
    """What every worker of one model version is started with."""

    model_name: str
    version: str
    model_dir: Path
    handler: str | None
    batch_size: int
    startup_timeout: float
    max_request_size: int
    max_response_size: int
    limit_max_image_pixels: bool = True
    threads: int | None = None
    heartbeat_interval: float = 5.0  # s between the worker's beats
    heartbeat_misses: int = 4  # beats a READY worker may miss before it is taken for hung
    metrics_config: Path | None = None  # TorchServe's metrics YAML (absolute): its model metrics, made in the worker
    deps_dir: Path | None = None  # the model's pip-installed requirements, first on PYTHONPATH after serve's root


class WorkerProcess:
    """One worker process; `id` is TorchServe's worker id (a port-like number as text)."""

    def __init__(self, worker_id: str, spec: WorkerSpec, gpu: int | None = None) -> None:
        self.id, self.spec, self.gpu = worker_id, spec, gpu
        self.state = STARTING
        self.pid: int | None = None
        self.start_time = time.time()
        self.exited = asyncio.Event()
        self._proc: SpawnedProcess | None = None
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._tasks: list[asyncio.Task[Any]] = []
        self._on_exit: list[Callable[[], None]] = []
        self._kill_requested = False
        self._heartbeat: HeartbeatPipe | None = None
        self.lost_reason: str | None = None  # why the server gave up on a live process (it stopped answering)
        self.ended_by: str | None = None  # unresponsive, response_timeout, memory: why it was ended on purpose
        self.loaded_memory = 0  # resident bytes once the model was loaded (READY)
        self.optimization: dict[str, Any] = {}  # the ready handshake's report (serve/worker/optimizing.py)
        self.load_metrics: list[dict[str, Any]] = []  # the ready handshake's: metrics initialize recorded
        self.continuous = False  # the handshake says its handler runs in continuous mode (serve/worker/continuous.py)

    @property
    def alive(self) -> bool:
        return self._proc is not None and not self.exited.is_set()

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.returncode

    def on_exit(self, callback: Callable[[], None]) -> None:
        """Call `callback` (once) when the process exits."""
        self._on_exit.append(callback)

    async def start(self) -> None:
        """Start the process and wait for its handshake; ModelLoadError with the handler's error otherwise."""
        spec = self.spec
        beat = self._heartbeat = HeartbeatPipe()
        try:
            self._proc = await spawn(
                [sys.executable, "-P", "-m", "serve.worker.process", *self._arguments(), "--heartbeat-fd",
                 str(beat.child_fd), "--heartbeat-interval", str(spec.heartbeat_interval)],
                cwd=str(spec.model_dir),
                env=self._environment(),
                stream_limit=STREAM_BUFFER,
                pass_fds=(beat.child_fd,),
            )  # fmt: skip
        except BaseException:
            beat.close()
            raise
        beat.attach()
        self.pid, self.start_time = self._proc.pid, time.time()
        self._tasks = [asyncio.create_task(self._pump_stderr()), asyncio.create_task(self._watch_exit())]
        if self._kill_requested:  # stopped while the process was being created
            self.kill()
        try:
            async with asyncio.timeout(spec.startup_timeout):
                message = await read_message(self._stdout, HANDSHAKE_BYTES)
        except TimeoutError:
            self.kill()
            raise self._load_error(f"the model did not load within startup_timeout={spec.startup_timeout:g}s; "
                                   "raise startupTimeout in the model-config or startup_timeout") from None  # fmt: skip
        except ProtocolError as e:
            self.kill()
            raise self._load_error(f"the worker wrote something that is not a handshake: {e}") from None
        await self._check_handshake(message)
        self.state = READY
        self.loaded_memory = self.memory_usage()
        beat.restart_clock()
        self._tasks.append(asyncio.create_task(self._watch_heartbeat(beat)))

    async def _check_handshake(self, message: Message | None) -> None:
        if message is None:
            await self.wait_exit(5.0)
            raise self._load_error(f"the worker exited with {self.exit_description()} while loading the model"
                                   f"{self.output_tail()}")  # fmt: skip
        header = message[0]
        if header.get("type") == "load_error":
            await self.wait_exit(5.0)
            frames = header.get("traceback") or ""
            detail = f"{header.get('error_type')}: {header.get('message')}"
            if header.get("invalid_model"):  # a file of the archive was refused: its message says all (400)
                raise self._load_error(detail, InvalidModel)
            raise self._load_error(detail + (f"\nTraceback (most recent call last):\n{frames}" if frames else ""))
        if header.get("type") != "ready":
            self.kill()
            raise self._load_error(f"unexpected handshake {header.get('type')!r} from the worker")
        optimization = header.get("optimization")
        self.optimization = optimization if isinstance(optimization, dict) else {}
        self.continuous = header.get("continuous") is True
        metrics = header.get("metrics")  # what the handler recorded while it loaded
        self.load_metrics = metrics if isinstance(metrics, list) else []

    def _load_error(self, detail: str, kind: type[ModelLoadError] = ModelLoadError) -> ModelLoadError:
        self.state = DEAD
        return kind(f"worker {self.id} could not load the model: {detail}")

    async def send(self, header: dict[str, Any], payloads: list[bytes]) -> None:
        """Write one message; WorkerError when the process is gone."""
        stdin = self._proc.stdin if self._proc else None
        if stdin is None or stdin.is_closing() or not self.alive:  # a closed pipe: the worker is gone
            raise WorkerError(self.death_message("before the batch was sent"))
        try:
            stdin.write(encode(header, payloads))
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            raise WorkerError(self.death_message("while the batch was sent")) from None

    def post(self, header: dict[str, Any]) -> None:
        """Write one small message without waiting for the pipe to drain (a cancel, from a synchronous callback);
        dropped when the process is gone. Frames are written whole, so it never splits another message."""
        stdin = self._proc.stdin if self._proc else None
        if stdin is not None and not stdin.is_closing() and self.alive:
            stdin.write(encode(header))

    async def receive(self, timeout: float | None) -> Message:
        """The next message; TimeoutError after `timeout` s (None: no limit), WorkerError when the process died or
        garbled it."""
        # a re-encoded (v1/v2) answer may be REENCODED_TEXT_RATIO times max_response_size as it travels here
        limit = self.spec.max_response_size * REENCODED_TEXT_RATIO * self.spec.batch_size + HANDSHAKE_BYTES
        try:
            async with asyncio.timeout(timeout):
                message = await read_message(self._stdout, limit)
        except ProtocolError as e:
            self.kill()
            raise WorkerError(f"Worker {self.id} sent a malformed reply and was stopped: {e}") from None
        if message is None:
            await self.wait_exit(2.0)
            raise WorkerError(self.death_message("while running a batch"))
        return message

    async def stop(self, timeout: float) -> None:
        """Close the worker's input (it exits on its own), and kill it if it is still running after `timeout` s."""
        self.state = UNLOADING
        if self._proc is not None and self._proc.stdin is not None and not self._proc.stdin.is_closing():
            self._proc.stdin.close()
        if not await self.wait_exit(timeout):
            self.kill()
            await self.wait_exit(5.0)
        self.state = STOPPED
        # the stderr pump ends at EOF; a process the handler started may still hold stderr open
        _, pending = await asyncio.wait(self._tasks, timeout=2.0) if self._tasks else (set(), set())
        for task in pending:
            task.cancel()

    def kill(self, cause: str | None = None) -> None:
        """SIGKILL the worker and anything it started (its process group); `cause` names why, for `ended_by`."""
        self._kill_requested = True
        self.ended_by = self.ended_by or cause
        if self._proc is None or self._proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)

    def memory_usage(self) -> int:
        """Resident memory of the process in bytes (0 when unknown). Read after every batch: with os.open and
        os.read (3 system calls) rather than a text file object (7, and half the time per read)."""
        try:
            fd = os.open(f"/proc/{self.pid}/statm", os.O_RDONLY)
        except OSError:
            return 0
        try:
            return int(os.read(fd, 256).split()[1]) * PAGE_SIZE
        except (OSError, ValueError, IndexError):
            return 0
        finally:
            os.close(fd)

    def exit_description(self) -> str:
        code = self.returncode
        if code is None:
            return "no exit code yet"
        if code < 0:
            try:
                return f"signal {signal.Signals(-code).name}"
            except ValueError:
                return f"signal {-code}"
        return f"exit code {code}"

    def output_tail(self) -> str:
        lines = list(self._tail)[-5:]
        return "; last output:\n" + "\n".join(lines) if lines else ""

    def death_message(self, when: str) -> str:
        """TorchServe's "Worker died." with what we know: which worker, how it ended, its last output."""
        if self.lost_reason:
            return f"Worker died. {self.lost_reason}"
        how = self.exit_description()
        return f"Worker died. Worker {self.id} (pid {self.pid}) exited {when} ({how}){self.output_tail()}"

    @property
    def _stdout(self) -> asyncio.StreamReader:
        assert self._proc is not None and self._proc.stdout is not None  # set by start()
        return self._proc.stdout

    def _arguments(self) -> list[str]:
        s = self.spec
        args = ["--model-dir", str(s.model_dir), "--batch-size", str(s.batch_size),
                "--max-response-size", str(s.max_response_size),
                "--max-input-bytes", str(s.max_request_size * s.batch_size * 2 + HANDSHAKE_BYTES),
                "--limit-max-image-pixels", "true" if s.limit_max_image_pixels else "false"]  # fmt: skip
        if s.handler:
            args += ["--handler", s.handler]
        if self.gpu is not None:
            args += ["--gpu", str(self.gpu)]
        if s.metrics_config is not None:
            args += ["--metrics-config", str(s.metrics_config)]
        return args

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        root = str(Path(serve.__file__).resolve().parents[1])
        deps = str(self.spec.deps_dir) if self.spec.deps_dir else ""  # serve/management/requirements.py
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, deps, env.get("PYTHONPATH", "")) if p)
        if self.spec.threads:
            for key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
                env[key] = str(self.spec.threads)
        return env

    async def wait_exit(self, timeout: float) -> bool:
        """True once the process exited (or never started), False if it still runs after `timeout` s."""
        if self._proc is None:
            return True
        try:
            async with asyncio.timeout(timeout):
                await self._proc.wait()  # not `exited`: its watcher task may be cancelled (event loop shutdown)
            return True
        except TimeoutError:
            return False

    async def _watch_heartbeat(self, beat: HeartbeatPipe) -> None:
        """Kill the worker once it has been silent for heartbeat_interval x heartbeat_misses s while READY (or
        stopping: a hung worker would never finish its batch and exit)."""
        interval, misses = self.spec.heartbeat_interval, self.spec.heartbeat_misses
        while self.state in (READY, UNLOADING) and not self.exited.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self.exited.wait()
            silent = beat.silence()
            if self.exited.is_set() or silent <= interval * misses:
                continue
            then = "killed" if self.state == UNLOADING else "killed and a new worker is started"
            self.lost_reason = (
                f"Worker {self.id} (pid {self.pid}) sent no heartbeat for {silent:.1f} s (worker_heartbeat_interval="
                f"{interval:g}s x worker_heartbeat_misses={misses}): it was stopped (SIGSTOP), deadlocked or stuck in "
                f"native code holding the GIL, so it was {then}. A handler that holds the GIL that long on purpose "
                "needs a larger worker_heartbeat_misses"
            )  # fmt: skip
            self.kill("unresponsive")
            return

    async def _watch_exit(self) -> None:
        assert self._proc is not None
        await self._proc.wait()
        if self._heartbeat is not None:
            self._heartbeat.close()
        if self.state not in (UNLOADING, STOPPED):
            self.state = DEAD
        self.exited.set()
        for callback in self._on_exit:
            callback()

    async def _pump_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        prefix, pending = f"[{self.spec.model_name} {self.spec.version} worker {self.id}]", b""
        while chunk := await self._proc.stderr.read(65536):
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                self._log_line(prefix, line)
            if len(pending) > 65536:  # a very long line without newline: log it in pieces
                self._log_line(prefix, pending)
                pending = b""
        if pending:
            self._log_line(prefix, pending)

    def _log_line(self, prefix: str, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()
        self._tail.append(text)
        model_log.info("%s %s", prefix, text)
