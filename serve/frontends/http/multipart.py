"""A small `multipart/form-data` parser (RFC 7578) for inference requests; python-multipart is not a dependency.

The body is split on the boundary delimiter with `bytes.find` (C speed, no per-line Python loop: an image upload
of several megabytes costs one pass), and only each part's few header lines are parsed in Python. Part headers
are read with the standard library's `email.message.Message`, which handles quoted parameters.
"""

from __future__ import annotations

import dataclasses
from email.message import Message

from serve.errors import InvalidInput


@dataclasses.dataclass(frozen=True)
class Part:
    name: str
    content_type: str | None  # only when the part carried a Content-Type header (file parts do)
    data: bytes
    filename: str | None = None


def boundary_of(content_type: str) -> str:
    """The `boundary` parameter of a multipart Content-Type header."""
    msg = Message()
    msg["content-type"] = content_type
    boundary = msg.get_param("boundary")
    if not isinstance(boundary, str) or not boundary:
        raise InvalidInput(f"multipart request without a boundary in its Content-Type: {content_type!r}")
    return boundary


def parse_multipart(body: bytes, boundary: str) -> list[Part]:
    """The parts of a multipart body, in order; each must be a named form-data field."""
    delimiter = b"--" + boundary.encode("latin-1")
    start = body.find(delimiter)
    if start < 0:
        raise InvalidInput(f"multipart body does not contain its boundary {boundary!r}")
    parts = []
    pos = start + len(delimiter)
    while not body.startswith(b"--", pos):  # "--" right after a delimiter closes the body
        end = body.find(b"\r\n" + delimiter, pos)
        if end < 0:
            raise InvalidInput("multipart body is truncated: the closing boundary is missing")
        parts.append(_part(body[_skip_line(body, pos) : end]))
        pos = end + 2 + len(delimiter)
    return parts


def _skip_line(body: bytes, pos: int) -> int:
    """The delimiter line may carry transport padding before its CRLF."""
    eol = body.find(b"\r\n", pos)
    return len(body) if eol < 0 else eol + 2


def _part(raw: bytes) -> Part:
    head, sep, data = raw.partition(b"\r\n\r\n")
    if not sep:
        if raw.startswith(b"\r\n"):  # a part with no headers at all
            head, data = b"", raw[2:]
        else:
            raise InvalidInput("multipart part without the blank line that ends its headers")
    headers = Message()
    for line in head.decode("utf-8", "replace").split("\r\n"):
        key, colon, value = line.partition(":")
        if colon:
            headers[key.strip()] = value.strip()
    name = headers.get_param("name", header="content-disposition")
    if not isinstance(name, str) or not name:
        raise InvalidInput("multipart part without a name in its Content-Disposition header; name every field")
    filename = headers.get_param("filename", header="content-disposition")
    content_type = (headers.get("content-type") or "").split(";")[0].strip().lower() or None
    return Part(name, content_type, data, filename if isinstance(filename, str) else None)
