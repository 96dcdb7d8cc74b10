"""Content codings: gzip/deflate bodies inflated against the stdlib's own compressors, bounded (no bomb)."""

from __future__ import annotations

import gzip
import zlib

import pytest

from serve.errors import InvalidInput, RequestTooLarge
from serve.frontends.http.encoding import accepted, inflate

DATA = b"serve " * 1000


def test_inflate_reads_what_the_stdlib_writes() -> None:
    assert inflate(gzip.compress(DATA), "gzip", len(DATA)) == DATA
    assert inflate(zlib.compress(DATA), "deflate", len(DATA)) == DATA  # what tritonclient sends
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    assert inflate(raw.compress(DATA) + raw.flush(), "deflate", len(DATA)) == DATA
    assert inflate(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip", 10) == b"abcd"  # two members


def test_inflate_stops_one_byte_past_the_limit() -> None:
    bomb = gzip.compress(b"\0" * 10_000_000)
    assert len(bomb) < 20_000
    with pytest.raises(RequestTooLarge, match="max_request_size"):
        inflate(bomb, "gzip", 1_000_000)
    with pytest.raises(RequestTooLarge):
        inflate(gzip.compress(DATA), "gzip", len(DATA) - 1)


def test_inflate_refuses_what_is_not_the_coding() -> None:
    for data, coding in ((DATA, "gzip"), (gzip.compress(DATA)[:-20], "gzip"), (b"\xff" * 40, "deflate")):
        with pytest.raises(InvalidInput, match=f"not valid {coding}"):
            inflate(data, coding, 1 << 20)


def test_accepted_picks_gzip_then_deflate() -> None:
    assert accepted("gzip") == "gzip"
    assert accepted("deflate") == "deflate"
    assert accepted("br, deflate;q=0.5, gzip;q=0") == "deflate"
    assert accepted("identity") is None and accepted(None) is None
    assert accepted("*") == "gzip" and accepted("gzip;q=0, *") == "deflate"
