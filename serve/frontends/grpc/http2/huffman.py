"""HPACK's Huffman code (RFC 7541 Appendix B): decoding the header strings a client sent Huffman-coded.

The code is canonical: within one code length the symbols take consecutive codes in symbol order, and each length's
first code follows the previous length's last. So the code length of each of the 257 symbols (256 byte values and
EOS) defines it, and `CODE_LENGTHS` is the RFC's table reduced to that column. We never Huffman-code what we send
(HPACK lets an encoder choose; our header values are short), so only the decoder is here.
"""

from __future__ import annotations

from serve.frontends.grpc.http2.errors import CompressionError

EOS = 256
# The "len" column of RFC 7541 Appendix B, symbols 0-256 in order.
CODE_LENGTHS = (
    13,
    23,
    28,
    28,
    28,
    28,
    28,
    28,
    28,
    24,
    30,
    28,
    28,
    30,
    28,
    28,  # 0-15
    28,
    28,
    28,
    28,
    28,
    28,
    30,
    28,
    28,
    28,
    28,
    28,
    28,
    28,
    28,
    28,  # 16-31
    6,
    10,
    10,
    12,
    13,
    6,
    8,
    11,
    10,
    10,
    8,
    11,
    8,
    6,
    6,
    6,  # 32-47
    5,
    5,
    5,
    6,
    6,
    6,
    6,
    6,
    6,
    6,
    7,
    8,
    15,
    6,
    12,
    10,  # 48-63
    13,
    6,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,  # 64-79
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    8,
    7,
    8,
    13,
    19,
    13,
    14,
    6,  # 80-95
    15,
    5,
    6,
    5,
    6,
    5,
    6,
    6,
    6,
    5,
    7,
    7,
    6,
    6,
    6,
    5,  # 96-111
    6,
    7,
    6,
    5,
    5,
    6,
    7,
    7,
    7,
    7,
    7,
    15,
    11,
    14,
    13,
    28,  # 112-127
    20,
    22,
    20,
    20,
    22,
    22,
    22,
    23,
    22,
    23,
    23,
    23,
    23,
    23,
    24,
    23,  # 128-143
    24,
    24,
    22,
    23,
    24,
    23,
    23,
    23,
    23,
    21,
    22,
    23,
    22,
    23,
    23,
    24,  # 144-159
    22,
    21,
    20,
    22,
    22,
    23,
    23,
    21,
    23,
    22,
    22,
    24,
    21,
    22,
    23,
    23,  # 160-175
    21,
    21,
    22,
    21,
    23,
    22,
    23,
    23,
    20,
    22,
    22,
    22,
    23,
    22,
    22,
    23,  # 176-191
    26,
    26,
    20,
    19,
    22,
    23,
    22,
    25,
    26,
    26,
    26,
    27,
    27,
    26,
    24,
    25,  # 192-207
    19,
    21,
    26,
    27,
    27,
    26,
    27,
    24,
    21,
    21,
    26,
    26,
    28,
    27,
    27,
    27,  # 208-223
    20,
    24,
    20,
    21,
    22,
    21,
    21,
    23,
    22,
    22,
    25,
    25,
    24,
    24,
    26,
    23,  # 224-239
    26,
    27,
    26,
    26,
    27,
    27,
    27,
    27,
    27,
    28,
    27,
    27,
    27,
    27,
    27,
    26,  # 240-255
    30,  # 256-256
)


def _codes() -> list[int]:
    """The code of each symbol, built from the lengths as a canonical code is."""
    codes, code, previous = [0] * len(CODE_LENGTHS), -1, 0
    for symbol in sorted(range(len(CODE_LENGTHS)), key=lambda s: (CODE_LENGTHS[s], s)):
        length = CODE_LENGTHS[symbol]
        code = (code + 1) << (length - previous)
        codes[symbol], previous = code, length
    return codes


CODES = _codes()
# code bits with a leading 1 (so 0b101 and 0b0101 differ) -> symbol: one dict lookup per bit read
_BY_MARKED_CODE = {(1 << CODE_LENGTHS[s]) | code: s for s, code in enumerate(CODES)}


def huffman_decode(data: bytes) -> bytes:
    """The bytes a Huffman-coded HPACK string holds. CompressionError for EOS inside the string, a code longer than
    30 bits, or padding that is not the most significant bits of EOS or is longer than 7 bits (RFC 7541 5.2)."""
    out = bytearray()
    marked, bits = 1, 0
    lookup = _BY_MARKED_CODE.get
    for byte in data:
        for shift in (7, 6, 5, 4, 3, 2, 1, 0):
            marked = (marked << 1) | ((byte >> shift) & 1)
            bits += 1
            symbol = lookup(marked) if bits >= 5 else None
            if symbol is None:
                if bits > 30:
                    raise CompressionError("a Huffman code longer than 30 bits in a header string")
                continue
            if symbol == EOS:
                raise CompressionError("EOS inside a Huffman-coded header string")
            out.append(symbol)
            marked, bits = 1, 0
    if bits > 7 or marked != (1 << (bits + 1)) - 1:
        raise CompressionError("a Huffman-coded header string ends with bad padding")
    return bytes(out)
