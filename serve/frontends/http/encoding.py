"""HTTP content codings on the inference routes (`/predictions`, `/v2/.../infer`): `Content-Encoding: gzip|deflate`
request bodies are inflated, `Accept-Encoding: gzip|deflate` answers are compressed, as Triton does and
tritonclient's `request_compression_algorithm` / `response_compression_algorithm` ask.

Decisions:
- The inflated body is bounded by `max_request_size` like any body (no decompression bomb): inflating stops one
  byte past the limit and the request is a 413 with TorchServe's body; the compressed bytes were already bounded
  by the middleware. A truncated or corrupt stream is a 400; an unknown coding (`br`, `zstd`) a 415 naming the
  ones served. `identity` (or none) leaves the body alone.
- `deflate` is the zlib format (RFC 9110, and what tritonclient sends); a raw deflate stream is accepted too, as
  browsers and curl may send one. Concatenated gzip members are read as one body (RFC 1952).
- Answers: the first of gzip, deflate the client accepts (q=0 excludes), only for a whole (not streamed) body;
  the `Content-Encoding` and `Vary: Accept-Encoding` headers say so.
"""

from __future__ import annotations

import zlib

from starlette.requests import Request
from starlette.responses import Response

from serve.errors import InvalidInput
from serve.frontends.http.body_limit import too_large

CODINGS = ("gzip", "deflate")
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class UnsupportedEncoding(InvalidInput):
    """A request body in a content coding this server does not read: 415."""

    code = 415


async def request_body(request: Request) -> bytes:
    """The request body, inflated when its `Content-Encoding` is gzip or deflate (see the module docstring)."""
    return decoded(
        await request.body(), request.headers.get("content-encoding"), request.app.state.settings.max_request_size
    )


def decoded(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """`body` inflated by its `Content-Encoding` (None or identity: as it is), at most `limit` bytes."""
    if not content_encoding:
        return body
    coding = content_encoding.strip().lower()
    if coding in ("", "identity"):
        return body
    if coding not in CODINGS:
        raise UnsupportedEncoding(f"Content-Encoding {coding!r} is not supported: send the body as gzip, deflate "
                                  "or uncompressed")  # fmt: skip
    return inflate(body, coding, limit)


def inflate(data: bytes, coding: str, limit: int) -> bytes:
    """`data` inflated from `coding`; RequestTooLarge past `limit` bytes, InvalidInput when it is not `coding`."""
    try:
        return _inflate(data, _WBITS[coding], limit)
    except zlib.error as e:
        if coding == "deflate":  # a raw deflate stream (no zlib header)
            try:
                return _inflate(data, -zlib.MAX_WBITS, limit)
            except zlib.error:
                pass
        raise InvalidInput(f"the body is not valid {coding} data ({e}): compress it whole, or drop the "
                           "Content-Encoding header") from None  # fmt: skip


def _inflate(data: bytes, wbits: int, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    rest = data
    while rest:
        inflater = zlib.decompressobj(wbits)
        part = inflater.decompress(rest, limit - size + 1)
        size += len(part)
        if size > limit or inflater.unconsumed_tail:
            raise too_large(f"more than {limit} (inflated)", limit)
        if not inflater.eof:
            raise zlib.error("the compressed stream ends early")
        parts.append(part)
        rest = inflater.unused_data if wbits == _WBITS["gzip"] else b""
    return b"".join(parts)


def accepted(accept_encoding: str | None) -> str | None:
    """The coding to answer in: the first of gzip, deflate that `Accept-Encoding` allows, else None."""
    if not accept_encoding:
        return None
    allowed: set[str] = set()
    refused: set[str] = set()
    for item in accept_encoding.split(","):
        name, _, params = item.strip().partition(";")
        q = params.strip().removeprefix("q=").strip() if params.strip().startswith("q=") else "1"
        try:
            weight = float(q)
        except ValueError:
            weight = 0.0
        (allowed if weight > 0 else refused).add(name.strip().lower())
    return next((c for c in CODINGS if c in allowed or ("*" in allowed and c not in refused)), None)


def compress(response: Response, accept_encoding: str | None) -> Response:
    """`response` with its body compressed in the accepted coding (unchanged when none is, or it is empty)."""
    coding = accepted(accept_encoding)
    if coding is None or not getattr(response, "body", None) or "content-encoding" in response.headers:
        return response
    response.body = compressed(bytes(response.body), coding)
    response.headers["content-length"] = str(len(response.body))
    response.headers["content-encoding"] = coding
    response.headers["vary"] = "Accept-Encoding"
    return response


def compressed(body: bytes, coding: str) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, _WBITS[coding])
    return compressor.compress(body) + compressor.flush()
