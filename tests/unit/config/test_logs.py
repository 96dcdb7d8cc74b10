"""Logging setup: --log-config as a dictConfig JSON or fileConfig INI file, and the default text/JSON lines.

Each configuration runs in a fresh interpreter, so pytest's own logging handlers are never replaced.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

from serve.config.logs import JsonFormatter

SCRIPT = """
import logging, sys
from serve.config import load_settings, configure_logging
early = logging.getLogger("serve.early")   # exists before the config is applied
configure_logging(load_settings({k: v for k, v in [a.split("=", 1) for a in sys.argv[1:]]}, {}))
early.warning("from early")
logging.getLogger("serve.late").info("from late")
"""


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], cwd=tmp_path, capture_output=True, text=True, timeout=30, check=True
    )


def test_default_text_lines(tmp_path: Path) -> None:
    err = run(tmp_path).stderr
    assert "[WARNING] serve.early: from early" in err and "[INFO] serve.late: from late" in err


def test_json_lines(tmp_path: Path) -> None:
    lines = [json.loads(line) for line in run(tmp_path, "log_format=json").stderr.splitlines()]
    assert [(e["level"], e["logger"], e["message"]) for e in lines] == [
        ("WARNING", "serve.early", "from early"),
        ("INFO", "serve.late", "from late"),
    ]


def test_dict_config_keeps_existing_loggers(tmp_path: Path) -> None:
    out = tmp_path / "out.log"
    config = {
        "version": 1,
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(out), "level": "INFO"}},
        "root": {"handlers": ["file"], "level": "INFO"},
    }
    (tmp_path / "log.json").write_text(json.dumps(config))
    run(tmp_path, f"log_config={tmp_path / 'log.json'}")
    assert out.read_text().splitlines() == ["from early", "from late"]


def test_ini_file_config(tmp_path: Path) -> None:
    out = tmp_path / "out.log"
    (tmp_path / "log.ini").write_text(
        "[loggers]\nkeys=root\n[handlers]\nkeys=file\n[formatters]\nkeys=plain\n"
        "[logger_root]\nlevel=WARNING\nhandlers=file\n"
        f"[handler_file]\nclass=FileHandler\nformatter=plain\nargs=({str(out)!r},)\n"
        "[formatter_plain]\nformat=%(levelname)s %(message)s\n"
    )
    run(tmp_path, f"log_config={tmp_path / 'log.ini'}")
    assert out.read_text().splitlines() == ["WARNING from early"]


def test_json_formatter_carries_exceptions() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed %s", ("here",), sys.exc_info())
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "failed here" and "ValueError: boom" in entry["exception"]
