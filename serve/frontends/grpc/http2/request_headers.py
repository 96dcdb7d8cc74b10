"""Is a request's header block well formed (RFC 9113 section 8)? `check_request` and `check_trailers` say no with a
`Malformed` naming the field, which the connection turns into a stream error PROTOCOL_ERROR (section 8.1.1).

What is checked, and why each matters to a server behind a proxy or beside other clients:
- Field names are lowercase tokens: no character in 0x00-0x20, 0x41-0x5A (uppercase) or 0x7F-0xFF, and not empty
  (8.2.1). Field values hold no NUL, CR or LF (a CR/LF would split the field when a proxy or a log writes it as
  HTTP/1.1) and do not start or end with a space or tab.
- Connection-specific fields (`connection`, `keep-alive`, `proxy-connection`, `transfer-encoding`, `upgrade`) are
  HTTP/1.1's and malformed here; `te` may only be `trailers` (8.2.2).
- Pseudo-header fields: only the request ones (`:method`, `:scheme`, `:path`, `:authority`; `:status` is a
  response's), each at most once, all before the first regular field (8.3), and `:method`, `:scheme` and a
  non-empty `:path` present (8.3.1; CONNECT, which has neither scheme nor path, is not a method a gRPC server
  serves). A trailer block carries no pseudo-header field (8.1).
- `content-length`, when present, is digits only; `content_length` returns it so the connection can hold the body
  to it (8.1.1: a body longer or shorter than it is malformed).
"""

from __future__ import annotations

import re

REQUEST_PSEUDO = frozenset({":method", ":scheme", ":path", ":authority"})
REQUIRED_PSEUDO = (":method", ":scheme", ":path")
CONNECTION_SPECIFIC = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"})
_BAD_NAME = re.compile(r"[\x00-\x20A-Z\x7f-\xff]")  # hpack decodes names as latin-1: one character per byte
GOOD_NAMES_KEPT = 4096  # names that passed, remembered so that a client's usual headers are checked once
_GOOD_NAMES: set[str] = set()


class Malformed(Exception):
    """The header block breaks RFC 9113 section 8: a stream error PROTOCOL_ERROR on its stream."""


def check_request(fields: list[tuple[str, str]]) -> None:
    seen: set[str] = set()
    regular = False
    for name, value in fields:
        if name[:1] == ":":
            if regular:
                raise Malformed(f"pseudo-header {name} after a regular header field")
            if name not in REQUEST_PSEUDO:
                raise Malformed(f"{name} is not a request pseudo-header field")
            if name in seen:
                raise Malformed(f"pseudo-header {name} twice")
            seen.add(name)
            if name == ":path" and not value:
                raise Malformed("an empty :path")
        else:
            regular = True
            _check_field(name, value)
    if len(seen) < 4 and any(name not in seen for name in REQUIRED_PSEUDO):
        raise Malformed(f"a request without {', '.join(name for name in REQUIRED_PSEUDO if name not in seen)}")


def check_trailers(fields: list[tuple[str, str]]) -> None:
    for name, value in fields:
        if name[:1] == ":":
            raise Malformed(f"pseudo-header {name} in a trailer block")
        _check_field(name, value)


def content_length(fields: list[tuple[str, str]]) -> int | None:
    """The request's declared body length, or None when it declares none."""
    declared = None
    for name, value in fields:
        if name == "content-length":
            if not value.isascii() or not value.isdigit() or (declared is not None and int(value) != declared):
                raise Malformed(f"content-length {value!r}: one decimal number of bytes")
            declared = int(value)
    return declared


def _check_field(name: str, value: str) -> None:
    if "\r" in value or "\n" in value or "\0" in value or (value and (value[0] in " \t" or value[-1] in " \t")):
        raise Malformed(f"header field {name}: a value with NUL, CR or LF, or leading or trailing whitespace")
    if name in _GOOD_NAMES:
        return
    if not name or _BAD_NAME.search(name):
        raise Malformed(f"header field name {name!r}: only lowercase token characters")
    if name in CONNECTION_SPECIFIC:
        raise Malformed(f"connection-specific header field {name}: not allowed in HTTP/2")
    if name == "te":
        if value != "trailers":
            raise Malformed(f"te: {value}: only 'trailers' is allowed in HTTP/2")
        return
    if len(_GOOD_NAMES) < GOOD_NAMES_KEPT:
        _GOOD_NAMES.add(name)
