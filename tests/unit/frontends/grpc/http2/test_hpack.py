"""serve's HPACK decoder and encoder against python-hyper's `hpack` (the reference coder), and RFC 7541's errors."""

from __future__ import annotations

import random

import pytest

hpack = pytest.importorskip("hpack")

from serve.frontends.grpc.http2.errors import CompressionError  # noqa: E402
from serve.frontends.grpc.http2.hpack import STATIC_TABLE, Decoder, encode  # noqa: E402
from serve.frontends.grpc.http2.huffman import huffman_decode  # noqa: E402

GRPC_REQUEST = [(":method", "POST"), (":scheme", "http"), (":path", "/inference.GRPCInferenceService/ModelInfer"),
                (":authority", "127.0.0.1:7070"), ("content-type", "application/grpc"), ("te", "trailers"),
                ("grpc-accept-encoding", "identity,deflate,gzip"), ("user-agent", "grpc-python/1.85 grpc-c/49.0.0"),
                ("grpc-timeout", "29999889u"), ("authorization", "Bearer 0123456789abcdef")]  # fmt: skip


def _fields(block: list[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(name.decode(), value.decode()) for name, value in block]


def test_the_static_table_is_the_rfcs() -> None:
    assert [(n.decode(), v.decode()) for n, v in hpack.table.HeaderTable.STATIC_TABLE] == list(STATIC_TABLE)


@pytest.mark.parametrize("huffman", [True, False])
def test_a_connection_of_blocks_decodes_as_the_reference_encoded_it(huffman: bool) -> None:
    rng = random.Random(7)
    encoder, decoder = hpack.Encoder(), Decoder()
    for i in range(300):  # the dynamic table fills, evicts and is reused across blocks
        fields = [*GRPC_REQUEST, (f"x-key-{rng.randrange(40)}", "v" * rng.randrange(300)), ("x-n", str(i))]
        assert decoder.decode(encoder.encode(fields, huffman=huffman)) == fields
    assert 0 < decoder.table_size <= 4096


def test_never_indexed_and_size_updates() -> None:
    encoder, decoder = hpack.Encoder(), Decoder()
    secret = hpack.NeverIndexedHeaderTuple("authorization", "Bearer k")
    assert decoder.decode(encoder.encode([secret, ("a", "b")])) == [("authorization", "Bearer k"), ("a", "b")]
    encoder.header_table_size = 256  # the next block starts with a size update, and the table shrinks to fit
    assert decoder.decode(encoder.encode(GRPC_REQUEST)) == GRPC_REQUEST
    assert decoder.table_size_limit == 256 and decoder.table_size <= 256
    assert decoder.decode(encoder.encode(GRPC_REQUEST)) == GRPC_REQUEST


def test_every_byte_value_survives_huffman_coding() -> None:
    rng = random.Random(1)
    coder = hpack.huffman.HuffmanEncoder(hpack.huffman_constants.REQUEST_CODES,
                                         hpack.huffman_constants.REQUEST_CODES_LENGTH)  # fmt: skip
    samples = [bytes(range(256)), b"", b"a", *(rng.randbytes(rng.randrange(1, 64)) for _ in range(300))]
    for raw in samples:
        assert huffman_decode(coder.encode(raw)) == raw


def test_the_reference_decoder_reads_what_we_encode() -> None:
    fields = [(":status", "200"), ("content-type", "application/grpc"), ("grpc-message", "x" * 300),
              ("grpc-status", "0")]  # fmt: skip
    assert _fields(hpack.Decoder().decode(encode(fields), raw=True)) == fields


@pytest.mark.parametrize(("block", "why"), [
    (b"\x80", "index 0"),
    (b"\xbf\x10", "index 62+ with an empty dynamic table"),
    (b"\x00\x81", "a string that runs past the block"),
    (b"\x00\x01a\x81\xff", "Huffman padding of 8 bits"),
    (b"\x00\x01a\x84\xff\xff\xff\xff", "EOS inside a Huffman string"),
    (b"\x82\x3f\xe1\x1f", "a table size update after a field"),
    (b"\x3f\xe2\x1f", "a table size update above the announced 4096"),
    (b"\xff\xff\xff\xff\xff\xff\x01", "an integer of 5 continuation bytes"),
])  # fmt: skip
def test_decoding_errors(block: bytes, why: str) -> None:
    with pytest.raises(CompressionError):
        Decoder().decode(block)


def test_repeated_fields_are_encoded_once_and_the_kept_ones_are_bounded(monkeypatch) -> None:
    from serve.frontends.grpc.http2 import hpack as ours

    answer = [(":status", "200"), ("content-type", "application/grpc"), ("grpc-status", "0")]
    made: list[tuple[str, str]] = []
    encode_field = ours._encode_field

    def counted(name: str, value: str) -> bytes:
        made.append((name, value))
        return encode_field(name, value)

    monkeypatch.setattr(ours, "_encoded", {})
    monkeypatch.setattr(ours, "_encode_field", counted)
    blocks = {ours.encode(answer) for _ in range(100)}
    assert made == answer and len(blocks) == 1
    assert _fields(hpack.Decoder().decode(blocks.pop(), raw=True)) == answer  # the reference reads it
    for i in range(3 * ours.ENCODED_KEPT):  # fields that never repeat (a message, a request id)
        ours.encode([("grpc-message", f"call {i} failed")])
    assert len(ours._encoded) <= ours.ENCODED_KEPT
