"""The leaves of the model-config YAML subset: plain scalars, quoted strings and flow collections (`[a, b]`, `{a: 1}`).

Plain scalars resolve as PyYAML's `safe_load` resolves them (YAML 1.1, which TorchServe's Python backend uses):
`yes/no/on/off/true/false` in their three casings are booleans, `~`/`null`/empty are None, `0x1F`, `0b101`,
`010` (octal, 8), `1_000` and `1:20` (sexagesimal, 80) are ints, `1.5`, `.5`, `.inf`, `.nan` are floats. One
deliberate difference: `1e-5`, `1.0e5` and `-.5` are floats here, where PyYAML leaves them strings (its 1.1 float
pattern wants a dot and a signed exponent), a well-known surprise for hyper-parameters in YAML. Timestamps stay
strings (PyYAML makes `datetime.date`s, which are not JSON-serialisable). Anchors, aliases, tags and block scalars
are refused by name with the line they are on.
"""

from __future__ import annotations

import math
import re
from typing import Any

from serve.errors import ArchiveError

_BOOLS = {v: True for w in ("yes", "true", "on") for v in (w, w.capitalize(), w.upper())}
_BOOLS |= {v: False for w in ("no", "false", "off") for v in (w, w.capitalize(), w.upper())}
_NULLS = {"", "~", "null", "Null", "NULL"}
_INT = re.compile(r"[-+]?(?:0b[01_]+|0x[0-9a-fA-F_]+|0[0-7_]+|0|[1-9][0-9_]*(?::[0-5]?[0-9])*)")
_FLOAT = re.compile(
    r"[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|\.[0-9_]+(?:[eE][-+]?[0-9]+)?|[0-9][0-9_]*[eE][-+]?[0-9]+"
    r"|[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|\.(?:inf|Inf|INF))|\.(?:nan|NaN|NAN)"
)
_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r",
            "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0", "L": "\u2028",
            "P": "\u2029"}  # fmt: skip
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
# what a plain scalar may not start with, and why
UNSUPPORTED = {
    "&": "anchors ('&name') are not supported",
    "*": "aliases ('*name') are not supported",
    "!": "tags ('!tag', '!!type') are not supported",
    "|": "block scalars ('|') are not supported; write the text on one line in quotes",
    ">": "block scalars ('>') are not supported; write the text on one line in quotes",
    "%": "directives ('%') are not supported",
    "@": "'@' is reserved in YAML and cannot start a plain value; quote it",
    "`": "'`' is reserved in YAML and cannot start a plain value; quote it",
}


class Incomplete(Exception):
    """A flow collection that continues on the next line."""


def fail(line: int, message: str) -> ArchiveError:
    return ArchiveError(f"line {line}: {message}")


def resolve(text: str) -> Any:
    """A plain scalar's value: bool, None, int, float or the string itself (PyYAML's YAML 1.1 rules)."""
    if text in _NULLS:
        return None
    if text in _BOOLS:
        return _BOOLS[text]
    if _INT.fullmatch(text):
        return _to_int(text.replace("_", ""))
    if _FLOAT.fullmatch(text):
        return _to_float(text.replace("_", "").lower())
    return text


def _to_int(v: str) -> int | str:
    sign = -1 if v.startswith("-") else 1
    digits = v.lstrip("+-")
    try:
        if digits.startswith("0b"):
            return sign * int(digits[2:], 2)
        if digits.startswith("0x"):
            return sign * int(digits[2:], 16)
        if ":" in digits:
            return sign * _sexagesimal(digits)
        if digits.startswith("0") and digits != "0":
            return sign * int(digits, 8)
        return sign * int(digits)
    except ValueError:  # only underscores after a prefix ("0x_"): not a number after all
        return v


def _to_float(v: str) -> float:
    sign = -1.0 if v.startswith("-") else 1.0
    digits = v.lstrip("+-")
    if digits == ".inf":
        return sign * math.inf
    if digits == ".nan":
        return math.nan
    if ":" in digits:  # 1:30.5 = 90.5
        whole, _, frac = digits.partition(".")
        return sign * (_sexagesimal(whole) + float("0." + (frac or "0")))
    return sign * float(digits)


def _sexagesimal(digits: str) -> int:
    total = 0
    for part in digits.split(":"):
        total = total * 60 + int(part)
    return total


def quoted(text: str, pos: int, line: int) -> tuple[str, int]:
    """The string of the quoted scalar starting at text[pos], and the position after its closing quote."""
    quote = text[pos]
    out: list[str] = []
    i = pos + 1
    while i < len(text):
        c = text[i]
        if c == quote:
            if quote == "'" and text.startswith("''", i):
                out.append("'")
                i += 2
                continue
            return "".join(out), i + 1
        if c == "\\" and quote == '"':
            s, i = _escape(text, i + 1, line)
            out.append(s)
            continue
        out.append(c)
        i += 1
    raise fail(line, f"unterminated {quote}quoted{quote} string (strings may not span lines here)")


def _escape(text: str, i: int, line: int) -> tuple[str, int]:
    if i >= len(text):
        raise fail(line, "a double-quoted string ends in a lone backslash")
    c = text[i]
    if c in _ESCAPES:
        return _ESCAPES[c], i + 1
    width = _HEX_ESCAPES.get(c)
    code = text[i + 1 : i + 1 + width] if width else ""
    if not width or len(code) != width or not all(ch in "0123456789abcdefABCDEF" for ch in code):
        raise fail(line, f"unknown escape '\\{text[i : i + 1 + (width or 0)]}' in a double-quoted string")
    return chr(int(code, 16)), i + 1 + width


def check_plain_start(text: str, line: int) -> None:
    """Refuse a plain scalar that starts with an indicator of a YAML feature this subset does not read."""
    if text[:1] in UNSUPPORTED:
        raise fail(line, f"{UNSUPPORTED[text[0]]} (at {text!r})")
    if text.startswith("? ") or text == "?":
        raise fail(line, "complex mapping keys ('? ') are not supported")


class Flow:
    """A recursive-descent reader of one flow collection or scalar, as found after `key: ` or `- `."""

    def __init__(self, text: str, line: int) -> None:
        self.text, self.line, self.pos = text, line, 0

    def parse_all(self) -> Any:
        value = self.value()
        self._skip()
        if self.pos != len(self.text):
            raise fail(self.line, f"unexpected {self.text[self.pos :]!r} after a value")
        return value

    def _skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] == " ":
            self.pos += 1

    def _peek(self) -> str:
        self._skip()
        if self.pos >= len(self.text):
            raise Incomplete
        return self.text[self.pos]

    def value(self) -> Any:
        c = self._peek()
        if c == "[":
            return self._seq()
        if c == "{":
            return self._map()
        if c in "'\"":
            s, self.pos = quoted(self.text, self.pos, self.line)
            return s
        return self._plain()

    def _plain(self) -> Any:
        start = self.pos
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c in ",[]{}" or (c == ":" and self.text[self.pos + 1 : self.pos + 2] in ("", " ", ",", "]", "}")):
                break
            self.pos += 1
        token = self.text[start : self.pos].rstrip()
        check_plain_start(token, self.line)
        return resolve(token)

    def _seq(self) -> list[Any]:
        self.pos += 1
        items: list[Any] = []
        while self._peek() != "]":
            items.append(self.value())
            if not self._comma("]"):
                break
        self.pos += 1
        return items

    def _map(self) -> dict[Any, Any]:
        self.pos += 1
        out: dict[Any, Any] = {}
        while self._peek() != "}":
            key = self.value()
            if isinstance(key, (list, dict)):
                raise fail(self.line, "a list or mapping as a mapping key is not supported")
            value = None
            if self._peek() == ":":
                self.pos += 1
                value = None if self._peek() in ",}" else self.value()
            if key in out:
                raise fail(self.line, f"duplicate key {key!r} in a flow mapping")
            out[key] = value
            if not self._comma("}"):
                break
        self.pos += 1
        return out

    def _comma(self, close: str) -> bool:
        """Consume the ',' between items; False when the collection closes here."""
        c = self._peek()
        if c == ",":
            self.pos += 1
            return True
        if c != close:
            raise fail(self.line, f"expected ',' or '{close}' in a flow collection, found {self.text[self.pos :]!r}")
        return False
