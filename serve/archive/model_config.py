"""The model-config YAML (`--config-file`) read without PyYAML: the subset TorchServe's documented configs use.

    minWorkers: 1            # comments anywhere outside quotes
    deviceIds: [0, 1]        # flow lists and maps, which may span lines
    handler:                 # nested block mappings
      labels:                # block lists, of scalars or of mappings ("- name: x")
        - cat
      threshold: 0.5

Scalars resolve as PyYAML's safe_load resolves them (see yaml_scalars.py, with its one documented difference).
Not supported, each refused with the line and a hint: anchors/aliases, tags, block scalars (`|`, `>`), multi-line
plain or quoted scalars, complex keys, several documents. Duplicate keys are an error (PyYAML silently keeps the
last one, which hides typos). The document must be a mapping; an empty file is `{}`. Lists and mappings may nest
at most 64 levels deep (safety.MAX_NESTING).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serve.archive.safety import check_nesting, too_deep
from serve.archive.yaml_scalars import Flow, Incomplete, check_plain_start, fail, quoted, resolve
from serve.errors import ArchiveError

_QUOTE_OPENERS = ("", ":", "-", "[", "{", ",", "?")


@dataclass
class _Line:
    no: int  # 1-based, for messages
    indent: int
    text: str  # without indentation, comment and trailing blanks


def parse_model_config(text: str, source: str = "model-config") -> dict[Any, Any]:
    """The mapping a model-config YAML document holds; ArchiveError naming `source` and the line otherwise."""
    try:
        lines = _lines(text)
        if not lines:
            return {}
        parser = _Parser(lines)
        value = parser.block(lines[0].indent)
        if parser.i < len(lines):
            raise fail(lines[parser.i].no, f"unexpected {lines[parser.i].text!r} (check its indentation)")
    except ArchiveError as e:
        raise ArchiveError(f"{source} {e}") from None
    except RecursionError:
        raise ArchiveError(f"{source}: {too_deep('the document')}") from None
    check_nesting(value, f"{source}: the document")
    if not isinstance(value, dict):
        raise ArchiveError(f"{source}: the document must be a mapping of keys to values, not {type(value).__name__}")
    return value


def load_model_config(path: str | Path) -> dict[Any, Any]:
    """parse_model_config of a UTF-8 file."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ArchiveError(f"model-config {p.name!r} is not UTF-8 text ({e})") from None
    except OSError as e:
        raise ArchiveError(f"cannot read model-config {str(p)!r}: {e.strerror}") from None
    return parse_model_config(text, source=f"model-config {p.name!r}")


def _lines(text: str) -> list[_Line]:
    out: list[_Line] = []
    started = False
    for no, raw in enumerate(text.splitlines(), 1):
        content = raw.lstrip(" \t")
        if "\t" in raw[: len(raw) - len(content)] and content and not content.startswith("#"):
            raise fail(no, "a tab in the indentation; YAML indents with spaces only")
        body = _strip_comment(raw.lstrip(" "), no).rstrip()
        if not body:
            continue
        if body.startswith("%") and not started:
            raise fail(no, "directives ('%YAML', '%TAG') are not supported")
        if body == "---" or body.startswith("--- "):
            if started:
                raise fail(no, "several YAML documents ('---') in one model-config are not supported")
            started = True
            if body.strip() != "---":
                raise fail(no, "content after '---' on the same line is not supported")
            continue
        if body == "...":
            break
        started = True
        out.append(_Line(no, len(raw) - len(raw.lstrip(" ")), body))
    return out


def _strip_comment(body: str, no: int) -> str:
    """The line without its comment: '#' at the start or after a blank, outside quoted strings."""
    i, prev = 0, ""
    while i < len(body):
        c = body[i]
        if c in "'\"" and prev in _QUOTE_OPENERS:
            _, i = quoted(body, i, no)
            prev = c
            continue
        if c == "#" and (i == 0 or body[i - 1] in " \t"):
            return body[:i]
        if c not in " \t":
            prev = c
        i += 1
    return body


def _is_item(text: str) -> bool:
    return text == "-" or text.startswith("- ")


def _split_entry(text: str, no: int) -> tuple[Any, str] | None:
    """(key, rest) of a `key: value` line, or None when the line is not a mapping entry."""
    if text[0] in "[{":
        return None
    if text[0] in "'\"":
        key, end = quoted(text, 0, no)
        rest = text[end:].lstrip(" ")
        if rest == ":" or rest.startswith(": "):
            return key, rest[1:].strip()
        return None
    at = text.find(": ")
    if at < 0 and text.endswith(":"):
        at = len(text) - 1
    if at < 0:
        return None
    key = text[:at].rstrip()
    check_plain_start(key, no)
    if not key:
        raise fail(no, "a mapping entry with an empty key")
    return resolve(key), text[at + 1 :].strip()


class _Parser:
    """Indentation-driven recursive descent over the cleaned lines; `i` is the next line to read."""

    def __init__(self, lines: list[_Line]) -> None:
        self.lines, self.i = lines, 0

    def _at(self, indent: int) -> _Line | None:
        if self.i < len(self.lines) and self.lines[self.i].indent == indent:
            return self.lines[self.i]
        return None

    def block(self, indent: int) -> Any:
        line = self.lines[self.i]
        if _is_item(line.text):
            return self._seq(indent)
        if _split_entry(line.text, line.no) is not None:
            return self._map(indent)
        self.i += 1
        value = self._inline(line.text, line)
        self._no_deeper(indent, line)
        return value

    def _map(self, indent: int) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        while (line := self._at(indent)) is not None:
            entry = _split_entry(line.text, line.no)
            if entry is None:
                what = "a list item" if _is_item(line.text) else repr(line.text)
                raise fail(line.no, f"expected 'key: value' here, found {what} (check its indentation)")
            key, rest = entry
            if key in out:
                raise fail(line.no, f"duplicate key {key!r} (already set above)")
            if isinstance(key, float) and key != key:
                raise fail(line.no, "'.nan' cannot be a mapping key")
            self.i += 1
            out[key] = self._nested(indent, same_indent_list=True) if not rest else self._inline(rest, line)
            if rest:
                self._no_deeper(indent, line)
        return out

    def _seq(self, indent: int) -> list[Any]:
        items: list[Any] = []
        while (line := self._at(indent)) is not None and _is_item(line.text):
            rest = line.text[1:].lstrip(" ")
            if not rest:
                self.i += 1
                items.append(self._nested(indent, same_indent_list=False))
                continue
            # the item's content starts a node of its own, at the column where it is written
            col = indent + len(line.text) - len(rest)
            self.lines[self.i] = _Line(line.no, col, rest)
            items.append(self.block(col))
        if self.i < len(self.lines) and self.lines[self.i].indent > indent:
            raise fail(self.lines[self.i].no, "unexpected indentation after a list item")
        return items

    def _nested(self, indent: int, same_indent_list: bool) -> Any:
        """The value under a bare `key:` or `-`: a deeper block, a list at the key's own indent, or None."""
        if self.i >= len(self.lines):
            return None
        nxt = self.lines[self.i]
        if nxt.indent > indent:
            return self.block(nxt.indent)
        if same_indent_list and nxt.indent == indent and _is_item(nxt.text):
            return self._seq(indent)
        return None

    def _no_deeper(self, indent: int, line: _Line) -> None:
        if self.i < len(self.lines) and self.lines[self.i].indent > indent:
            raise fail(
                self.lines[self.i].no,
                f"unexpected indentation after the value on line {line.no} "
                "(multi-line plain values are not supported; quote the value on one line)",
            )

    def _inline(self, text: str, line: _Line) -> Any:
        """A value written on the line itself: flow collection (possibly continued on later lines) or scalar."""
        if text[0] in "[{":
            return self._flow(text, line)
        if text[0] in "'\"":
            return Flow(text, line.no).parse_all()
        check_plain_start(text, line.no)
        if _is_item(text):
            raise fail(line.no, "a list item cannot follow 'key:' on the same line; put it on the next line")
        if ": " in text or text.endswith(":"):
            raise fail(line.no, f"mapping values are not allowed here: {text!r} (quote the value)")
        return resolve(text)

    def _flow(self, text: str, line: _Line) -> Any:
        while True:
            try:
                return Flow(text, line.no).parse_all()
            except Incomplete:
                if self.i >= len(self.lines):
                    raise fail(line.no, f"unterminated flow collection {text!r}") from None
                text = f"{text} {self.lines[self.i].text}"
                self.i += 1
