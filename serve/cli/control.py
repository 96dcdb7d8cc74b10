"""What `serve start | stop | status` do: run in the foreground, launch in the background, stop, report.

Only a background start refuses to run beside a server that holds the pid file (pidfile.py).
Background start launches `python -P -m serve.cli.main start --foreground ...` in a new session (so a closing
terminal does not take it down), output appended to `{log_location}/serve.log`, and returns once the startup
models are ready: `GET /ping` answers 200 (a 500 is the server saying it is starting, or unhealthy; any other
status means something else answers there, and is taken as up). If the server logs that it is up but not healthy
(a startup model has no ready worker: serve/server.py), exits first, or is not healthy within its startup timeout
plus a margin, the launch is undone (the server is stopped, the pid file removed), the log of this launch is
shown, and the exit status is 1.
Stop sends SIGTERM (the server drains in-flight requests), waits, then SIGKILLs the process group the launcher
created; then it removes the pid file and `key_file.json`, as `torchserve --stop` does.

Decision: the server process imports the serve this launcher runs, never one from the current directory. `-m`
puts the working directory first on sys.path, and TorchServe's READMEs have users work beside a clone named
`serve`, whose folder then shadowed the installed package ("cannot import name '__version__' from 'serve'"). `-P`
(Python 3.11's safe path) leaves the working directory out, and PYTHONPATH starts with this package's root, so
a source checkout that is not installed launches too.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from serve.cli import pidfile
from serve.cli.pidfile import ServerRecord
from serve.config import Settings, configure_logging, parse_address

STOP_WAIT_S = 60.0  # SIGTERM -> SIGKILL; the server's own drain is bounded below this
START_MARGIN_S = 30.0  # beyond default_startup_timeout, for interpreter start and listener binding
LOG_TAIL_LINES = 40
LOG_FILE_NAME = "serve.log"
NOT_HEALTHY = "but is not healthy"  # what serve/server.py logs when it is up without every startup model ready


def child_command(start_args: list[str]) -> list[str]:
    """The command a background start runs (tests replace it with a stand-in server)."""
    return [sys.executable, "-P", "-m", "serve.cli.main", "start", "--foreground", "--background-child", *start_args]


def child_environment() -> dict[str, str]:
    """The environment of the server a background start runs: this package's root first on PYTHONPATH."""
    root = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}


def start_wait(settings: Settings) -> float:
    """How long a background start waits for /ping."""
    return settings.default_startup_timeout + START_MARGIN_S


def foreground(settings: Settings, *, owns_pid_file: bool) -> int:
    """Run the server in this process until it stops; its exit status.

    The pid file is claimed when free, so `serve status`/`serve stop` see this server too. When another server
    holds it, this one still runs (tests and benchmarks run several on other ports; a port clash fails at bind)
    but stays invisible to `serve stop`, and says so.
    """
    path = pidfile.pid_file_path()
    if owns_pid_file:
        holder = pidfile.claim(path, _record(os.getpid(), settings, log_file=None))
        if holder is not None:
            print(f"serve: another server (pid {holder.pid}) holds {path}; serve stop will not stop this one.",
                  file=sys.stderr)  # fmt: skip
            owns_pid_file = False
    try:
        configure_logging(settings)
        server = importlib.import_module("serve.server")
        return int(server.run(settings))
    finally:
        if owns_pid_file:
            pidfile.release(path, os.getpid())


def start_background(settings: Settings, start_args: list[str], wait_s: float) -> int:
    """Launch the server detached and wait until it answers /ping; 0 when it does."""
    if parse_address(settings.inference_address)[1] == 0:
        print("serve: inference_address has port 0 (any free port), which a background start cannot wait on; start "
              "with --foreground and read the ports from ports_file", file=sys.stderr)  # fmt: skip
        return 2
    path = pidfile.pid_file_path()
    log_file = settings.log_location / LOG_FILE_NAME
    holder = pidfile.claim(path, _record(os.getpid(), settings, log_file))
    if holder is not None:
        print(_already_running(holder), file=sys.stderr)
        return 1
    try:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        offset = log_file.stat().st_size if log_file.exists() else 0
        with open(log_file, "ab") as log:
            child = subprocess.Popen(
                child_command(start_args),
                env=child_environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        pidfile.replace(path, _record(child.pid, settings, log_file))
    except OSError as e:
        pidfile.release(path, os.getpid())
        print(f"serve: cannot launch the server: {e}", file=sys.stderr)
        return 1
    problem = _wait_for_ping(settings.inference_address, child, wait_s, log_file, offset)
    if problem is None:
        print(f"serve started (pid {child.pid}); logs: {log_file}")
        print(_addresses(settings.inference_address, settings.management_address, settings.metrics_address))
        return 0
    _undo(child, path)
    print(f"serve: {problem}. Last lines of {log_file}:", file=sys.stderr)
    print(_log_tail(log_file, offset), file=sys.stderr)
    return 1


def stop() -> int:
    """Stop the running server (SIGTERM, then SIGKILL after STOP_WAIT_S); 0 also when none runs."""
    path = pidfile.pid_file_path()
    record = pidfile.running(path)
    if record is None:
        print("serve is not running.")
        return 0
    _signal(record.pid, signal.SIGTERM)
    if not _wait_gone(record, STOP_WAIT_S):
        _kill_group(record.pid)
        _wait_gone(record, 5.0)
        print(f"serve did not stop within {STOP_WAIT_S:g} s of SIGTERM; killed it (SIGKILL).", file=sys.stderr)
    pidfile.release(path, record.pid)
    if record.key_file:
        Path(record.key_file).unlink(missing_ok=True)
    print("serve has stopped.")
    return 0


def status() -> int:
    """Print whether the server runs: 0 running, 3 not running (the LSB status convention)."""
    record = pidfile.running(pidfile.pid_file_path())
    if record is None:
        print("serve is not running.")
        return 3
    print(f"serve is running (pid {record.pid})")
    print(_addresses(record.inference_address, record.management_address, record.metrics_address))
    if record.log_file:
        print(f"  logs:       {record.log_file}")
    return 0


def _record(pid: int, settings: Settings, log_file: Path | None) -> ServerRecord:
    return ServerRecord(
        pid=pid,
        start_ticks=pidfile.start_ticks(pid),
        inference_address=settings.inference_address,
        management_address=settings.management_address,
        metrics_address=settings.metrics_address,
        key_file=str(settings.key_file),
        log_file=None if log_file is None else str(log_file),
    )


def _already_running(holder: ServerRecord) -> str:
    return f"serve is already running (pid {holder.pid}); use serve stop"


def _addresses(inference: str, management: str, metrics: str) -> str:
    return f"  inference:  {inference}\n  management: {management}\n  metrics:    {metrics}"


def _ping_url(address: str) -> str:
    host, port, tls = parse_address(address)
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # wildcard binds answer on loopback
    host = f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{host}:{port}/ping"


def _wait_for_ping(address: str, child: subprocess.Popen[bytes], wait_s: float, log_file: Path,
                   offset: int) -> str | None:  # fmt: skip
    """None once /ping says Healthy; otherwise why not (a startup model failed, the server exited, the wait ran
    out)."""
    url = _ping_url(address)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # our own listener, possibly with a self-signed certificate
    # no proxies: http_proxy in the environment must not route a loopback probe elsewhere
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    deadline, answered = time.monotonic() + wait_s, False
    while time.monotonic() < deadline:
        code = child.poll()
        if code is not None:
            said = _log_lines(log_file, offset, "serve: ")  # main's one line for a refused start (exit 2)
            why = f" ({said[-1].removeprefix('serve: ')})" if said else ""
            return f"the server exited with status {code} before answering {url}{why}"
        try:
            with opener.open(url, timeout=1.0):
                return None
        except urllib.error.HTTPError as e:
            answered = True
            if e.code != 500:
                return None  # not serve's Unhealthy: the listener is up, its health cannot be told
            failure = _startup_failure(log_file, offset)
            if failure is not None:
                return f"a startup model failed: {failure}"
            time.sleep(0.1)
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    if answered:
        return f"the server was not healthy at {url} within {wait_s:g} s"
    return f"the server did not answer {url} within {wait_s:g} s"


def _startup_failure(log_file: Path, offset: int) -> str | None:
    """The line this launch logged when it came up without every startup model ready (serve/server.py), if any."""
    return next(iter(_log_lines(log_file, offset, NOT_HEALTHY, anywhere=True)), None)


def _log_lines(log_file: Path, offset: int, text: str, anywhere: bool = False) -> list[str]:
    """The lines this launch logged that start with `text` (or hold it, `anywhere`), stripped."""
    try:
        with open(log_file, "rb") as f:
            f.seek(offset)
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    return [line.strip() for line in lines if (text in line if anywhere else line.startswith(text))]


def _undo(child: subprocess.Popen[bytes], path: Path) -> None:
    """Stop a launch that failed, its workers included (the child leads its own process group)."""
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            _kill_group(child.pid)
            child.wait(timeout=5.0)
    pidfile.release(path, child.pid)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _kill_group(pid: int) -> None:
    """SIGKILL the process, and its group when it leads one (a background start), so workers die with it."""
    with contextlib.suppress(ProcessLookupError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)


def _wait_gone(record: ServerRecord, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while pidfile.is_running(record):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _log_tail(log_file: Path, offset: int) -> str:
    """The last lines this launch wrote to the log."""
    try:
        with open(log_file, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"(cannot read {log_file}: {e.strerror})"
    lines = text.rstrip("\n").splitlines()[-LOG_TAIL_LINES:]
    return "\n".join("  " + line for line in lines) if lines else "  (nothing was logged)"
