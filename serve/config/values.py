"""Typed readers for configuration values: a raw string (or an already typed CLI value) in, a checked value out.

Every reader takes `(key, value)` and raises ConfigError naming the key, the offending value and what is
accepted, so a bad `config.properties` line, `TS_*` variable or flag fails the start with one clear line.

Decisions on TorchServe's quirks:
- Booleans: Java's `Boolean.parseBoolean` reads anything but "true" as false, so `enable_model_api=yes` silently
  stays off. We accept true/false/yes/no/on/off/1/0 (any case) and refuse the rest.
- Numbers: a malformed number is an error here, never a silent fallback to the default.
- `unix:/path` addresses (TorchServe's Unix-socket listeners) are refused: every listener is `http(s)://host:port`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from serve.errors import ConfigError

# TorchServe's model name rule (ModelArchive / the management API)
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-.]*")
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
# per-version keys of the `models` property and of snapshots, with their JSON types (bool is not an int here)
MODEL_ENTRY_TYPES: dict[str, tuple[type, ...]] = {
    "defaultVersion": (bool,),
    "marName": (str,),
    "minWorkers": (int,),
    "maxWorkers": (int,),
    "batchSize": (int,),
    "maxBatchDelay": (int,),
    "responseTimeout": (int,),
    "startupTimeout": (int,),
    "runtimeType": (str,),
    "parallelLevel": (int,),
    "workerMemoryLimit": (int,),
}


def bad(key: str, value: Any, accepted: str) -> ConfigError:
    """The one error shape: `key = 'value' is not valid: accepted`."""
    return ConfigError(f"{key} = {value!r} is not valid: expected {accepted}")


def to_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise bad(key, value, "true or false")


def _integer(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise bad(key, value, "an integer")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise bad(key, value, "an integer") from None


def int_at_least(low: int) -> Callable[[str, Any], int]:
    """A reader of integers >= low."""

    def read(key: str, value: Any) -> int:
        number = _integer(key, value)
        if number < low:
            raise bad(key, value, f"an integer >= {low}")
        return number

    return read


def port(key: str, value: Any) -> int:
    number = _integer(key, value)
    if not 1 <= number <= 65535:
        raise bad(key, value, "a port number between 1 and 65535")
    return number


def port_or_0(key: str, value: Any) -> int:
    """A port, or 0: the system picks a free one when the server binds (ports_file says which)."""
    number = _integer(key, value)
    if not 0 <= number <= 65535:
        raise bad(key, value, "a port number between 1 and 65535, or 0 for any free port")
    return number


def positive_float(key: str, value: Any) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        raise bad(key, value, "a number") from None
    if not number > 0 or number == float("inf"):
        raise bad(key, value, "a finite number > 0")
    return number


def text(key: str, value: Any) -> str:
    out = str(value).strip()
    if not out:
        raise bad(key, value, "a non-empty value")
    return out


def optional_text(key: str, value: Any) -> str | None:
    """Empty means unset (e.g. `cors_allowed_origin=` in a file)."""
    out = str(value).strip()
    return out or None


def choice(*options: str) -> Callable[[str, Any], str]:
    """A reader of one of `options` (case-insensitive)."""

    def read(key: str, value: Any) -> str:
        out = str(value).strip().lower()
        if out not in options:
            raise bad(key, value, "one of " + ", ".join(options))
        return out

    return read


def path(key: str, value: Any) -> Path:
    return Path(text(key, value)).expanduser()


def optional_path(key: str, value: Any) -> Path | None:
    out = optional_text(key, value)
    return None if out is None else Path(out).expanduser()


def address(key: str, value: Any) -> str:
    """An `http(s)://host[:port]` listener address, checked and returned as given."""
    try:
        parse_address(str(value).strip())
    except ConfigError as e:
        raise bad(key, value, str(e)) from None
    return str(value).strip()


def parse_address(addr: str) -> tuple[str, int, bool]:
    """`http(s)://host[:port]` -> (host, port, tls). The port defaults to 80/443 (0: any free port, written to
    ports_file once bound); IPv6 hosts go in brackets."""
    accepted = "http://host:port or https://host:port (e.g. http://127.0.0.1:8080)"
    parts = urlsplit(addr)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"address {addr!r} is not valid: expected {accepted}")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ConfigError(f"address {addr!r} is not valid: expected {accepted}, with no path or query")
    try:
        number = parts.port
    except ValueError:
        raise ConfigError(f"address {addr!r} is not valid: the port must be a number between 0 and 65535 (0: any "
                          "free port)") from None  # fmt: skip
    tls = parts.scheme == "https"
    return parts.hostname, (443 if tls else 80) if number is None else number, tls


def comma_list(key: str, value: Any) -> tuple[str, ...]:
    """`a, b,c` (or a list from the CLI, whose items may hold commas too) -> ('a', 'b', 'c')."""
    items: Iterable[Any] = value if isinstance(value, (list, tuple)) else [value]
    return tuple(part.strip() for item in items for part in str(item).split(",") if part.strip())


def regex_list(key: str, value: Any) -> tuple[str, ...]:
    """Comma-separated regular expressions (allowed_urls), each compiled to catch mistakes at start."""
    patterns = comma_list(key, value)
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as e:
            raise bad(key, pattern, f"a valid regular expression ({e})") from None
    return patterns


def split_model_entry(entry: str) -> tuple[str | None, str]:
    """A `load_models`/`--models` entry -> (model name or None, archive or URL).

    `name=archive` names the model; TorchServe splits at the first '=', which breaks URLs with a query string,
    so here the left side only counts as a name when it is a valid model name.
    """
    name, sep, rest = entry.partition("=")
    if sep and MODEL_NAME.fullmatch(name.strip()) and rest.strip():
        return name.strip(), rest.strip()
    return None, entry.strip()


def load_models(key: str, value: Any) -> tuple[str, ...]:
    """`all`, or archives / `name=archive` entries (comma-separated in a file, separate words on the CLI)."""
    entries = comma_list(key, value)
    if any(e.lower() == "all" for e in entries):
        if len(entries) > 1:
            raise bad(key, value, "'all' alone, or a list of archives / name=archive entries")
        return ("all",)
    for entry in entries:
        name, _ = split_model_entry(entry)
        if name is None and "=" in entry and "://" not in entry:
            raise bad(key, entry, "name=archive where the name matches [A-Za-z0-9][A-Za-z0-9_.-]*")
    return entries


def json_object(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    try:
        out = json.loads(str(value))
    except json.JSONDecodeError as e:
        raise bad(key, value, f"a JSON object ({e})") from None
    if not isinstance(out, dict):
        raise bad(key, value, "a JSON object")
    return out


# a model name, as serve.archive.manifest checks it on register (the config layer sits below the archive layer)
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-.]*")


def models(key: str, value: Any) -> dict[str, Any]:
    """The `models` JSON: {name: {version: {defaultVersion, marName, minWorkers, ...}}}, types checked.

    Unknown per-version keys are kept (TorchServe has more of them than we use); known ones must have their type.
    """
    out = json_object(key, value)
    for name, versions in out.items():
        if len(name) > 256 or not MODEL_NAME.fullmatch(name):
            shown = repr(name[:64]) + ("" if len(name) <= 64 else f"... ({len(name)} characters)")
            raise ConfigError(f"{key}: model name {shown} is not valid: expected at most 256 characters matching "
                              f"{MODEL_NAME.pattern} (serve registers no model by another name)")  # fmt: skip
        if not isinstance(versions, dict):
            raise bad(key, versions, f"an object of versions for model {name!r}")
        for version, entry in versions.items():
            if not isinstance(entry, dict):
                raise bad(key, entry, f"an object of settings for model {name!r} version {version!r}")
            for field, types in MODEL_ENTRY_TYPES.items():
                got = entry.get(field)
                if got is not None and (not isinstance(got, types) or (bool not in types and isinstance(got, bool))):
                    where = f"{key}: model {name!r} version {version!r} field {field}"
                    raise bad(where, got, f"a JSON {types[0].__name__}")
    return out


def model_snapshot(key: str, value: Any) -> dict[str, Any]:
    """TorchServe's `model_snapshot`: {"name": "...cfg", "modelCount": N, "models": {...}}."""
    out = json_object(key, value)
    if not isinstance(out.get("modelCount", 0), int) or not isinstance(out.get("models", {}), dict):
        raise bad(key, value, 'a JSON object {"name": ..., "modelCount": N, "models": {...}}')
    models(f"{key}.models", out.get("models", {}))
    return out
