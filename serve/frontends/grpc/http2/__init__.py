"""HTTP/2 for serve's gRPC server: connection.py (frames, streams, flow control), hpack.py and huffman.py (header
compression, RFC 7541), errors.py (HTTP/2's error codes). Nothing here knows gRPC; ../call.py does."""
