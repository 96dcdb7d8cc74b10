"""Logging setup: `--log-config FILE` or a plain default.

TorchServe's `--log-config` takes a log4j2 XML file for its JVM; serve is Python, so it takes Python's logging
configs instead: a `.json` file is a `logging.config.dictConfig` dictionary, any other file is a
`logging.config.fileConfig` INI file (`[loggers]`, `[handlers]`, `[formatters]` sections). Unlike the stdlib
default, loggers that exist already stay enabled unless the config says `"disable_existing_loggers": true` (JSON;
INI files never disable them). A log4j2 `.xml` file is refused with a message saying so.
Without a file, INFO and above go to stderr, as text lines or, with `log_format=json`, as one JSON object per line
({"time", "level", "logger", "message"[, "exception"]}).
"""

from __future__ import annotations

import configparser
import json
import logging
import logging.config
from pathlib import Path
from typing import Any

from serve.config.settings import Settings
from serve.errors import ConfigError

TEXT_FORMAT = "%(asctime)s [%(levelname)s] %(name)s: %(message)s"
_WHAT = "a Python logging config: a dictConfig .json file or a fileConfig INI file"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, for log collectors."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def check_log_config(path: Path) -> dict[str, Any] | None:
    """Refuse a missing, XML or malformed log config; the parsed dict for JSON files, None for INI files."""
    if not path.is_file():
        raise ConfigError(f"log_config = '{path}' is not valid: the file does not exist (expected {_WHAT})")
    if path.suffix.lower() == ".xml":
        raise ConfigError(
            f"log_config = '{path}' is not valid: log4j2 XML configs are for TorchServe's JVM; expected {_WHAT}"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"log_config = '{path}' cannot be read: {e}") from None
    if path.suffix.lower() == ".json":
        try:
            config = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"log_config = '{path}' is not valid JSON ({e}); expected {_WHAT}") from None
        if not isinstance(config, dict) or "version" not in config:
            raise ConfigError(f"log_config = '{path}' is not valid: a dictConfig object needs a 'version' key")
        return config
    parser = configparser.ConfigParser()
    try:
        parser.read_string(text, str(path))
    except configparser.Error as e:
        raise ConfigError(f"log_config = '{path}' is not a valid INI file ({e}); expected {_WHAT}") from None
    if not parser.has_section("loggers"):
        raise ConfigError(f"log_config = '{path}' is not valid: a fileConfig INI file needs a [loggers] section")
    return None


def configure_logging(settings: Settings) -> None:
    """Apply settings.log_config, or the default text format; ConfigError when the config cannot be applied."""
    if settings.log_config is None:
        handler = logging.StreamHandler()
        handler.setFormatter(JsonFormatter() if settings.log_format == "json" else logging.Formatter(TEXT_FORMAT))
        logging.basicConfig(level=logging.INFO, handlers=[handler])
        return
    config = check_log_config(settings.log_config)
    try:
        if config is not None:
            # the stdlib default (True) would silence every logger serve created at import time
            logging.config.dictConfig({"disable_existing_loggers": False, **config})
        else:
            logging.config.fileConfig(settings.log_config, disable_existing_loggers=False)
    except (ValueError, TypeError, AttributeError, ImportError, KeyError, configparser.Error) as e:
        raise ConfigError(f"log_config = '{settings.log_config}' cannot be applied: {e}") from None
