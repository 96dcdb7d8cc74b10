"""The multipart/form-data parser: fields, files, binary content, and malformed bodies as 400s."""

from __future__ import annotations

import httpx
import pytest

from serve.errors import InvalidInput
from serve.frontends.http.multipart import Part, boundary_of, parse_multipart


def _encode(data: dict, files: dict) -> tuple[bytes, str]:
    request = httpx.Request("POST", "http://x/", data=data, files=files)
    return request.read(), request.headers["content-type"]


def test_fields_and_files_as_httpx_encodes_them():
    binary = bytes(range(256)) * 4 + b"\r\n--not-the-boundary\r\n"
    body, content_type = _encode({"mode": "fast"}, {"img": ("a.png", binary, "image/png")})
    parts = parse_multipart(body, boundary_of(content_type))
    assert parts == [Part("mode", None, b"fast"), Part("img", "image/png", binary, "a.png")]


def test_preamble_epilogue_quoted_names_and_empty_values():
    body = (b"preamble\r\n--b\r\nContent-Disposition: form-data; name=\"a b\"\r\n\r\n\r\n"
            b"--b\r\nContent-Disposition: form-data; name=c\r\nContent-Type: Application/JSON; charset=utf-8\r\n\r\n"
            b"{}\r\n--b--\r\nepilogue")  # fmt: skip
    parts = parse_multipart(body, "b")
    assert parts == [Part("a b", None, b""), Part("c", "application/json", b"{}")]


def test_boundary_parameter():
    assert boundary_of('multipart/form-data; boundary="quoted=="') == "quoted=="
    with pytest.raises(InvalidInput, match="without a boundary"):
        boundary_of("multipart/form-data")


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"no delimiter here", "does not contain its boundary"),
        (b"--b\r\nContent-Disposition: form-data; name=a\r\n\r\ndata", "truncated"),
        (b"--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b--", "without a name"),
        (b"--b\r\nContent-Disposition: form-data; name=a\r\nx\r\n--b--", "blank line"),
    ],
)
def test_malformed_bodies(body, needle):
    with pytest.raises(InvalidInput, match=needle):
        parse_multipart(body, "b")
