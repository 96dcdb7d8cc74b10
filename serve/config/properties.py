"""Java `.properties` files (TorchServe's `config.properties` and config snapshots): read, write, `$$NAME$$`.

    # comment            ! also a comment
    inference_address=http://0.0.0.0:8080
    model_store : /models          key and value split at the first unescaped '=', ':' or blank
    load_models = a.mar,\\
                  b.mar             a line ending in an odd number of backslashes continues on the next line
    model_store=$$MODEL_DIR$$       replaced by that environment variable (an unset one is an error)

Escapes are Java's: `\\t \\n \\r \\f`, `\\uXXXX`, and a backslash before any other character stands for that
character (`\\=`, `\\:`, `\\ `, `\\\\`). A later duplicate key wins, as in Java.
Deliberate difference: trailing blanks after a value are dropped (Java keeps them, so `model_store=/m ` names a
directory ending in a space); an escaped trailing blank (`\\ `) is kept.
Files are read as UTF-8 (Java reads ISO-8859-1); a file that is not valid UTF-8 is read as ISO-8859-1.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from serve.errors import ConfigError

_BLANK = " \t\f"
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ENV_REF = re.compile(r"\$\$([^$]+)\$\$")


def parse_properties(text: str, source: str = "config.properties") -> dict[str, str]:
    """Every key and value of a properties document, escapes resolved (no `$$NAME$$` substitution here)."""
    out: dict[str, str] = {}
    for line_no, logical in _logical_lines(text):
        key, value = _split(logical)
        try:
            out[_join_surrogates(_unescape(key)[0])] = _value(value)
        except ValueError as e:
            raise ConfigError(f"{source}:{line_no}: {e}") from None
    return out


def read_properties(path: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """A properties file with `$$NAME$$` references replaced from `environ`; ConfigError when unreadable."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read the config file {path}: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    props = parse_properties(text, str(path))
    return {key: substitute(key, value, environ, str(path)) for key, value in props.items()}


def substitute(key: str, value: str, environ: Mapping[str, str], source: str) -> str:
    """`$$NAME$$` -> environ[NAME], as TorchServe does for every config value."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise ConfigError(
                f"{source}: {key} = {value!r} refers to the environment variable {name}, which is not set; "
                f"set it or change the value"
            )
        return environ[name]

    return _ENV_REF.sub(one, value)


def format_property(key: str, value: str) -> str:
    """One `key=value` line that parse_properties reads back exactly (used for snapshot files)."""
    return _escape(key, is_key=True) + "=" + _escape(value, is_key=False)


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, logical line): comments and blank lines skipped, continuations joined."""
    natural = re.split(r"\r\n|\r|\n", text)
    i = 0
    while i < len(natural):
        start, line = i + 1, natural[i].lstrip(_BLANK)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if i >= len(natural):
                break
            line += natural[i].lstrip(_BLANK)
            i += 1
        yield start, line


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split(line: str) -> tuple[str, str]:
    """Raw (still escaped) key and value: the key ends at the first unescaped '=', ':' or blank."""
    i, n = 0, len(line)
    while i < n and line[i] not in "=:" + _BLANK:
        i += 2 if line[i] == "\\" else 1
    i = min(i, n)
    key, j = line[:i], i
    while j < n and line[j] in _BLANK:
        j += 1
    if j < n and line[j] in "=:":
        j += 1
        while j < n and line[j] in _BLANK:
            j += 1
    return key, line[j:]


def _value(raw: str) -> str:
    """The unescaped value without unescaped trailing blanks."""
    out, kept = _unescape(raw)
    stripped = out.rstrip(" \t\f")
    return _join_surrogates(out[: max(len(stripped), kept)])


def _unescape(raw: str) -> tuple[str, int]:
    """(text, length of the prefix that ends with the last escaped character)."""
    out: list[str] = []
    kept, i, n = 0, 0, len(raw)
    while i < n:
        ch = raw[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= n:  # a lone backslash at the very end (continuation at end of file)
            break
        nxt = raw[i + 1]
        if nxt == "u":
            digits = raw[i + 2 : i + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"malformed \\uXXXX escape {raw[i : i + 6]!r}: expected 4 hex digits")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_SIMPLE_ESCAPES.get(nxt, nxt))
            i += 2
        kept = len(out)
    return "".join(out), kept


def _join_surrogates(text: str) -> str:
    """`\\ud83d\\ude00` pairs (how Java writes characters beyond the BMP) -> one character."""
    if not any("\ud800" <= c <= "\udfff" for c in text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _escape(text: str, *, is_key: bool) -> str:
    out: list[str] = []
    for pos, ch in enumerate(text):
        if ch == "\\" or (ch in "=:#!" and (is_key or pos == 0)):
            out.append("\\" + ch)
        elif ch == " " and (is_key or pos == 0):
            out.append("\\ ")
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            encoded = ch.encode("utf-16-be", "surrogatepass")
            out += [f"\\u{int.from_bytes(encoded[k : k + 2], 'big'):04x}" for k in range(0, len(encoded), 2)]
    return "".join(out)
