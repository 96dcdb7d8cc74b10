"""`serve start | stop | status`: flags -> Settings, pid-file handling, background start and stop on stand-ins.

The server is replaced by stand-ins: a fake `serve.server` module for foreground starts, and for background starts
a small Python process (the "server" that start launches and stop ends) beside a /ping server that the test runs in
a thread on a port it bound itself (port 0, held for the whole test: no free port is picked and bound later).
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from serve.cli import control, pidfile
from serve.cli.main import main
from serve.cli.pidfile import ServerRecord
from serve.config import Settings

SLEEPER = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, {handler}); print('ready', flush=True); time.sleep(30)"
)
STAND_IN = "print('stand-in started', flush=True); import time; time.sleep(60)"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pid file, cwd (config.properties, key_file.json, model_store) and logs inside tmp_path."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.chdir(tmp_path)
    for name in ("TS_CONFIG_FILE", "LOG_LOCATION"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """Replace serve.server with a module whose run() records its Settings and whether the pid file was held."""
    seen: list[Settings] = []

    def run(settings: Settings) -> int:
        holds_pid_file.append(getattr(pidfile.read_record(pidfile.pid_file_path()), "pid", None) == os.getpid())
        seen.append(settings)
        return 0

    holds_pid_file: list[bool] = []

    monkeypatch.setitem(sys.modules, "serve.server", types.SimpleNamespace(run=run, holds_pid_file=holds_pid_file))
    return seen


def held_pid_file() -> list[bool]:
    """For each fake run so far: whether the running server held the pid file."""
    return sys.modules["serve.server"].holds_pid_file


@pytest.fixture
def spawn() -> Iterator[Any]:
    """Start stand-in processes; every one is killed at the end."""
    procs: list[subprocess.Popen[str]] = []

    def start(code: str, *args: str, session: bool = True) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True, start_new_session=session
        )
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip()  # it is up (handlers installed)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


@contextmanager
def ping_server(status: Callable[[str], int]) -> Iterator[int]:
    """An HTTP server in a thread on a port it bound (0 -> the port it got, yielded): GET answers status(path)."""

    class Ping(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status(self.path))
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ping)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def silent_port() -> Iterator[int]:
    """A port bound and held but not listening: connections to it are refused, and nobody else can take it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def record_for(proc: subprocess.Popen[str], **extra: Any) -> ServerRecord:
    return ServerRecord(pid=proc.pid, start_ticks=pidfile.start_ticks(proc.pid), **extra)


def write_pid_file(record: ServerRecord) -> Path:
    path = pidfile.pid_file_path()
    path.write_text(json.dumps(record.__dict__))
    return path


def test_flags_become_settings(tmp_path: Path, fake_server: list[Settings]) -> None:
    (tmp_path / "store").mkdir()
    cfg = tmp_path / "ts.properties"
    cfg.write_text("job_queue_size=7\nenable_model_api=false\n")
    log_cfg = tmp_path / "log.json"
    log_cfg.write_text('{"version": 1, "incremental": true}')
    argv = ["start", "--foreground", "--model-store", "store", "--models", "a=a.mar", "b.mar,c.mar", "--ts-config",
            str(cfg), "--ncs", "--dt", "--enable-model-api", "--log-config", str(log_cfg)]  # fmt: skip
    assert main(argv) == 0
    (s,) = fake_server
    assert s.model_store == tmp_path / "store" and s.load_models == ("a=a.mar", "b.mar", "c.mar")
    assert s.job_queue_size == 7 and s.enable_model_api and s.disable_token_authorization and s.ncs
    assert s.log_config == log_cfg and s.config_file == cfg
    assert held_pid_file() == [True] and not pidfile.pid_file_path().exists()  # released when run() returned


def test_long_flag_spellings_and_defaults(tmp_path: Path, fake_server: list[Settings]) -> None:
    (tmp_path / "model_store").mkdir()
    assert main(["start", "--foreground", "--no-config-snapshots", "--disable-token-auth"]) == 0
    assert main(["start", "--foreground"]) == 0
    first, second = fake_server
    assert first.ncs and first.disable_token_authorization
    assert not second.ncs and not second.disable_token_authorization and not second.enable_model_api
    assert second.model_store == tmp_path / "model_store"  # ./model_store when none is configured


def test_torchserve_spelling(fake_server: list[Settings], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--foreground", "--start", "--models", "all"]) == 0
    assert fake_server[0].load_models == ("all",)
    assert main(["--stop"]) == 0
    assert capsys.readouterr().out.strip() == "serve is not running."


def test_workflow_store(tmp_path: Path, fake_server: list[Settings], capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "wf").mkdir()
    assert main(["start", "--foreground", "--workflow-store", "wf"]) == 0
    assert fake_server[0].workflow_store == tmp_path / "wf"
    assert main(["start", "--foreground", "--workflow-store", "missing"]) == 2
    assert "workflow_store = " in capsys.readouterr().err


@pytest.mark.parametrize(
    "config,flags,needle",
    [
        ("job_queue_size=lots\n", [], "job_queue_size = 'lots'"),
        ("", ["--model-store", "missing"], "model_store = "),
        ("", ["--log-config", "log4j2.xml"], "log_config = "),
        ("inference_address=localhost:8080\n", [], "inference_address = 'localhost:8080'"),
    ],
)
def test_bad_config_exits_2_with_one_line(
    tmp_path: Path, fake_server: list[Settings], capsys: pytest.CaptureFixture[str], config: str, flags: list[str],
    needle: str,
) -> None:  # fmt: skip
    (tmp_path / "config.properties").write_text(config)
    (tmp_path / "log4j2.xml").write_text("<Configuration/>")
    for mode in ([], ["--foreground"]):
        assert main(["start", *mode, *flags]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("serve: ") and needle in err
    assert fake_server == [] and not pidfile.pid_file_path().exists()


def test_already_running(spawn: Any, fake_server: list[Settings], capsys: pytest.CaptureFixture) -> None:
    proc = spawn(SLEEPER.format(handler="signal.SIG_DFL"))
    write_pid_file(record_for(proc))
    assert main(["start"]) == 1  # a background start refuses
    assert capsys.readouterr().err.strip() == f"serve is already running (pid {proc.pid}); use serve stop"
    assert main(["start", "--foreground"]) == 0  # a foreground one runs, without the pid file, and says so
    assert f"another server (pid {proc.pid}) holds" in capsys.readouterr().err
    assert held_pid_file() == [False] and pidfile.read_record(pidfile.pid_file_path()) == record_for(proc)


def test_stale_pid_files_are_replaced(spawn: Any, fake_server: list[Settings]) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=10)
    write_pid_file(ServerRecord(pid=dead.pid))
    assert main(["start", "--foreground"]) == 0
    # a live pid whose start time differs is another program that reused the pid: stale too
    proc = spawn(SLEEPER.format(handler="signal.SIG_DFL"))
    write_pid_file(ServerRecord(pid=proc.pid, start_ticks=(pidfile.start_ticks(proc.pid) or 0) + 1))
    assert main(["start", "--foreground"]) == 0
    pidfile.pid_file_path().write_text("not json")
    assert main(["start", "--foreground"]) == 0
    assert held_pid_file() == [True, True, True] and proc.poll() is None  # the stranger was never signalled


def test_stop_terminates_and_cleans_up(tmp_path: Path, spawn: Any, capsys: pytest.CaptureFixture[str]) -> None:
    proc = spawn(SLEEPER.format(handler="signal.SIG_DFL"))
    key_file = tmp_path / "key_file.json"
    key_file.write_text("{}")
    write_pid_file(record_for(proc, key_file=str(key_file), inference_address="http://127.0.0.1:1"))
    assert main(["status"]) == 0
    assert f"serve is running (pid {proc.pid})" in capsys.readouterr().out
    assert main(["stop"]) == 0
    assert capsys.readouterr().out.strip() == "serve has stopped."
    assert proc.wait(timeout=5) == -signal.SIGTERM
    assert not pidfile.pid_file_path().exists() and not key_file.exists()
    assert main(["status"]) == 3
    assert capsys.readouterr().out.strip() == "serve is not running."


def test_stop_falls_back_to_sigkill(spawn: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setattr(control, "STOP_WAIT_S", 0.3)
    proc = spawn(SLEEPER.format(handler="signal.SIG_IGN"))
    write_pid_file(record_for(proc))
    started = time.monotonic()
    assert main(["stop"]) == 0
    assert proc.wait(timeout=30) == -signal.SIGKILL and time.monotonic() - started < 30  # STOP_WAIT_S, not 60 s
    out = capsys.readouterr()
    assert "killed it (SIGKILL)" in out.err and out.out.strip() == "serve has stopped."


def test_background_start_waits_for_ping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    launched: list[list[str]] = []

    def stand_in(start_args: list[str]) -> list[str]:
        launched.append(start_args)
        return [sys.executable, "-c", STAND_IN]

    monkeypatch.setattr(control, "child_command", stand_in)
    with ping_server(lambda path: 401 if path == "/ping" else 404) as port:
        (tmp_path / "config.properties").write_text(f"inference_address=http://127.0.0.1:{port}\n")
        _start_and_stop(tmp_path, launched, capsys)


def _start_and_stop(tmp_path: Path, launched: list[list[str]], capsys: Any) -> None:
    try:
        assert main(["start", "--models", "a.mar", "--dt"]) == 0
        record = pidfile.read_record(pidfile.pid_file_path())
        assert record is not None and record.pid != os.getpid() and pidfile.is_running(record)
        assert os.getpgid(record.pid) == record.pid  # its own session and process group
        assert launched == [["--models", "a.mar", "--dt"]]
        assert record.log_file == str(tmp_path / "logs" / "serve.log")
        assert f"serve started (pid {record.pid})" in capsys.readouterr().out
        assert main(["start"]) == 1  # a second start is refused
        assert main(["stop"]) == 0
        assert not pidfile.is_running(record) and not pidfile.pid_file_path().exists()
    finally:
        record = pidfile.read_record(pidfile.pid_file_path())
        if record is not None and pidfile.is_running(record):
            os.kill(record.pid, signal.SIGKILL)


def test_background_start_reports_an_early_exit(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    code = "print('model store is on fire'); raise SystemExit(3)"
    monkeypatch.setattr(control, "child_command", lambda args: [sys.executable, "-c", code])
    assert main(["start"]) == 1
    err = capsys.readouterr().err
    assert "exited with status 3" in err and "model store is on fire" in err
    assert not pidfile.pid_file_path().exists()


def test_background_start_names_the_startup_models_a_refused_start_names(monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: Any) -> None:  # fmt: skip
    said = "serve: startup model(s) could not be registered: gone (missing.mar): Model not found at: missing.mar"
    code = f"import sys; print('booting'); print({said!r}, file=sys.stderr); raise SystemExit(2)"
    monkeypatch.setattr(control, "child_command", lambda args: [sys.executable, "-c", code])
    assert main(["start"]) == 1
    first = capsys.readouterr().err.splitlines()[0]
    assert "exited with status 2" in first and "(startup model(s) could not be registered: gone (missing.mar)" in first


def test_background_start_gives_up_after_the_wait(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    code = "import time; print('loading forever', flush=True); time.sleep(30)"
    monkeypatch.setattr(control, "child_command", lambda args: [sys.executable, "-c", code])
    monkeypatch.setattr(control, "start_wait", lambda settings: 0.5)
    wait_for_ping = control._wait_for_ping

    def once_it_printed(address: str, child: Any, wait_s: float, log_file: Path, offset: int) -> str | None:
        """The 0.5 s wait starts once the stand-in printed, however slowly a loaded machine starts it."""
        deadline = time.monotonic() + 60
        while b"loading forever" not in log_file.read_bytes()[offset:] and time.monotonic() < deadline:
            time.sleep(0.02)
        return wait_for_ping(address, child, wait_s, log_file, offset)

    monkeypatch.setattr(control, "_wait_for_ping", once_it_printed)
    with silent_port() as port:
        (Path("config.properties")).write_text(f"inference_address=http://127.0.0.1:{port}\n")
        assert main(["start"]) == 1
    err = capsys.readouterr().err
    assert "did not answer" in err and "loading forever" in err
    assert not pidfile.pid_file_path().exists()


def test_background_start_refuses_port_0(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setattr(control, "child_command", lambda args: pytest.fail("nothing may be launched"))
    Path("config.properties").write_text("inference_address=http://127.0.0.1:0\n")
    assert main(["start"]) == 2
    assert "port 0" in capsys.readouterr().err and not pidfile.pid_file_path().exists()


# A stand-in serve that, at `fail_after` s, logs serve/server.py's "up but not healthy" line (a startup model whose
# handler crash-loops); its /ping (the test's thread) is 500 until `healthy_after` s, then 200.
UNHEALTHY_LOG = """
import sys, time
fail_after = float(sys.argv[1])
if fail_after >= 0:
    time.sleep(fail_after)
    print("WARNING serve is listening on 127.0.0.1 but is not healthy: broken version 1.0: broken on purpose",
          flush=True)
time.sleep(60)
"""


def _start_stand_in(monkeypatch: pytest.MonkeyPatch, healthy_after: float, fail_after: float) -> int:
    code = [sys.executable, "-c", UNHEALTHY_LOG, str(fail_after)]
    monkeypatch.setattr(control, "child_command", lambda args: code)
    start = time.monotonic()
    with ping_server(lambda path: 200 if time.monotonic() - start > healthy_after else 500) as port:
        Path("config.properties").write_text(f"inference_address=http://127.0.0.1:{port}\n")
        try:
            return main(["start"])
        finally:
            record = pidfile.read_record(pidfile.pid_file_path())
            if record is not None and pidfile.is_running(record):
                os.kill(record.pid, signal.SIGKILL)


def test_background_start_waits_until_the_startup_models_are_healthy(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: Any) -> None:  # fmt: skip
    started = time.monotonic()
    assert _start_stand_in(monkeypatch, healthy_after=1.0, fail_after=-1) == 0
    assert time.monotonic() - started >= 1.0  # the 500s while starting were waited out
    assert "serve started" in capsys.readouterr().out


def test_background_start_fails_when_a_startup_model_fails(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    assert _start_stand_in(monkeypatch, healthy_after=60, fail_after=0.5) == 1
    err = capsys.readouterr().err
    assert "a startup model failed" in err and "broken on purpose" in err
    assert not pidfile.pid_file_path().exists()  # the launch was undone
